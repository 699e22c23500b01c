//! A small realistic policy: on CreateContainer it sets an annotation and an
//! env variable named after its settings, and denies containers that carry
//! the annotation `example.com/deny`. With the settings `slow-start` its
//! `configure` takes an hour (its time limit ends it sooner): a policy that
//! declares CreateContainer only and is still loading for as long as a
//! test needs.
use nri_wasm_sdk::*;

struct Annotate;

impl Policy for Annotate {
    const EVENTS: &'static [EventKind] = &[EventKind::CreateContainer];

    fn init(settings: &str) -> Result<(), String> {
        if settings.contains(' ') {
            return Err(format!("settings must be a single word, got {settings:?}"));
        }
        if settings == "slow-start" {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
        Ok(())
    }

    fn create_container(e: &Event) -> Result<Reply, String> {
        if let Some(reason) = e.container_annotation("example.com/deny") {
            return Err(format!("denied by annotation: {reason}"));
        }
        let tag = if settings().is_empty() { "annotate" } else { settings() };
        let seen = e.env().len().to_string();
        Ok(Reply::adjust(
            ContainerAdjustment::new()
                .set_annotation(&format!("example.com/{tag}"), &e.container_meta().name)
                .set_env(&format!("POLICY_{}", tag.to_uppercase().replace(['-', '.'], "_")), &seen),
        ))
    }
}

export_policy!(Annotate);
