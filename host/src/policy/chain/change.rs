//! What a policy's reply changed, kept as the message the merge took.
//!
//! Reports (`eval`, `eval --replay`, the demo) and the audit and decision
//! log lines say what each policy changed. The chain keeps the converted
//! reply for them, moved out of the path after the merge, so nothing is
//! printed or parsed on the way: each report describes the message in its
//! own words, and text is made only where it is shown. The chain keeps a
//! reply only when the evaluation explains or the policy is audited
//! ([`super::EvalContext::explain`]); on other events nothing is kept.

use std::fmt;

use nri_wasm_api::api as pb;

/// Most bytes of a change as log text.
const MAX_TEXT_BYTES: usize = 4096;

/// A reply larger than this (encoded) is not printed for a log line: its
/// JSON would be cut to [`MAX_TEXT_BYTES`] anyway.
const MAX_PRINTED_BYTES: usize = 4 * MAX_TEXT_BYTES;

/// The changes of one policy's reply, in the message its event answers with.
#[derive(Clone, PartialEq)]
pub enum Change {
    /// CreateContainer: an adjustment of the new container, updates of
    /// others, evictions.
    Create(pb::CreateContainerResponse),
    /// UpdateContainer and StopContainer: updates and evictions.
    Update(pb::UpdateContainerResponse),
    /// Any other event: updates and evictions, which go out with
    /// UpdateContainers once the event is answered.
    Updates(pb::UpdateContainersRequest),
}

// NRI's messages have no floating-point fields, so their equality is an
// equivalence.
impl Eq for Change {}

impl Change {
    /// The adjustment of the event's new container (CreateContainer only).
    pub fn adjust(&self) -> Option<&pb::ContainerAdjustment> {
        match self {
            Self::Create(r) => r.adjust.as_ref(),
            Self::Update(_) | Self::Updates(_) => None,
        }
    }

    /// Updates of containers, in the reply's order.
    pub fn update(&self) -> &[pb::ContainerUpdate] {
        match self {
            Self::Create(r) => &r.update,
            Self::Update(r) => &r.update,
            Self::Updates(r) => &r.update,
        }
    }

    /// Evictions of containers, in the reply's order.
    pub fn evict(&self) -> &[pb::ContainerEviction] {
        match self {
            Self::Create(r) => &r.evict,
            Self::Update(r) => &r.evict,
            Self::Updates(r) => &r.evict,
        }
    }

    /// The message itself, for printing it as NRI's JSON.
    pub fn message(&self) -> &dyn protobuf::MessageDyn {
        match self {
            Self::Create(r) => r,
            Self::Update(r) => r,
            Self::Updates(r) => r,
        }
    }
}

impl From<pb::CreateContainerResponse> for Change {
    fn from(reply: pb::CreateContainerResponse) -> Self {
        Self::Create(reply)
    }
}

impl From<pb::UpdateContainerResponse> for Change {
    fn from(reply: pb::UpdateContainerResponse) -> Self {
        Self::Update(reply)
    }
}

impl From<pb::UpdateContainersRequest> for Change {
    fn from(reply: pb::UpdateContainersRequest) -> Self {
        Self::Updates(reply)
    }
}

/// For a log line: the message as NRI's JSON on one line, cut at 4 KiB;
/// a large reply only by its size, so that a log line costs little.
impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let message = self.message();
        let size = message.compute_size_dyn() as usize;
        if size > MAX_PRINTED_BYTES {
            return write!(f, "a reply of {size} bytes (too large to show)");
        }
        let json = protobuf_json_mapping::print_to_string(message).unwrap_or_default();
        f.write_str(&crate::text::guest_text(&json, MAX_TEXT_BYTES))
    }
}

/// For `{:?}` (the dispatcher's debug line of each step): the kind and the
/// same bounded text as a log line, never the whole message, which a policy
/// may make a MiB long.
impl fmt::Debug for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            Self::Create(_) => "Create",
            Self::Update(_) => "Update",
            Self::Updates(_) => "Updates",
        };
        f.debug_tuple(kind).field(&format_args!("{self}")).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protobuf::MessageField;

    fn eviction(id: &str) -> pb::ContainerEviction {
        pb::ContainerEviction { container_id: id.into(), reason: "full".into(), ..Default::default() }
    }

    #[test]
    fn each_kind_gives_its_parts() {
        let mut adjust = pb::ContainerAdjustment::default();
        adjust.annotations.insert("example.com/a".into(), "1".into());
        let create = Change::from(pb::CreateContainerResponse {
            adjust: MessageField::some(adjust.clone()),
            evict: vec![eviction("x")],
            ..Default::default()
        });
        assert_eq!(create.adjust(), Some(&adjust));
        assert_eq!((create.update().len(), create.evict()[0].container_id.as_str()), (0, "x"));

        let update = pb::ContainerUpdate { container_id: "y".into(), ..Default::default() };
        let on_update =
            Change::from(pb::UpdateContainerResponse { update: vec![update.clone()], ..Default::default() });
        assert_eq!((on_update.adjust(), on_update.update(), on_update.evict()), (None, &[update][..], &[][..]));

        let updates = Change::from(pb::UpdateContainersRequest { evict: vec![eviction("z")], ..Default::default() });
        assert_eq!((updates.adjust(), updates.update().len(), updates.evict()[0].reason.as_str()), (None, 0, "full"));
        assert_eq!(updates.message().descriptor_dyn().name(), "UpdateContainersRequest");
    }

    #[test]
    fn log_text_is_json_when_small_and_the_size_when_large() {
        let small = Change::from(pb::UpdateContainersRequest { evict: vec![eviction("z")], ..Default::default() });
        assert_eq!(small.to_string(), r#"{"evict": [{"containerId": "z", "reason": "full"}]}"#);

        let mut adjust = pb::ContainerAdjustment::default();
        adjust.args.push("a".repeat(MAX_PRINTED_BYTES));
        let large =
            Change::from(pb::CreateContainerResponse { adjust: MessageField::some(adjust), ..Default::default() });
        let text = large.to_string();
        assert!(text.starts_with("a reply of ") && text.ends_with(" bytes (too large to show)"), "{text}");

        // Between the two: printed, and cut at 4 KiB.
        let mut adjust = pb::ContainerAdjustment::default();
        adjust.args.push("b".repeat(2 * MAX_TEXT_BYTES));
        let cut =
            Change::from(pb::CreateContainerResponse { adjust: MessageField::some(adjust), ..Default::default() });
        let text = cut.to_string();
        assert!(text.starts_with(r#"{"adjust": {"args": ["bbb"#) && text.len() < MAX_TEXT_BYTES + 64, "{}", text.len());
    }

    #[test]
    fn debug_text_is_bounded_like_the_log_text() {
        let mut adjust = pb::ContainerAdjustment::default();
        for i in 0..2000 {
            adjust.annotations.insert(format!("example.com/key-{i}"), "v".repeat(40));
        }
        let big =
            Change::from(pb::CreateContainerResponse { adjust: MessageField::some(adjust), ..Default::default() });
        let debug = format!("{big:?}");
        assert!(debug.len() < 200, "{} bytes: {}", debug.len(), &debug[..200.min(debug.len())]);
        assert!(debug.starts_with("Create(") && debug.contains("too large to show"), "{debug}");

        let small = Change::from(pb::UpdateContainersRequest { evict: vec![eviction("z")], ..Default::default() });
        let debug = format!("{small:?}");
        assert!(debug.starts_with("Updates(") && debug.contains("\"z\""), "{debug}");
        assert!(debug.len() <= MAX_TEXT_BYTES + 16, "{debug}");
    }
}
