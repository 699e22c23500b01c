//! The runtime's ground truth: every pod and container, as the runtime
//! itself would record them.
//!
//! A [`NodeModel`] changes only the way a runtime's state changes: pods and
//! containers come and go with the lifecycle calls a test makes, a container
//! is created with the adjustment the plugin answered (applied by the
//! reference spec generator, [`crate::reference`]), and updates, whether
//! they come in a reply or through the plugin's own `UpdateContainers`, are
//! applied to the containers they name. Tests compare what the plugin
//! believes (its node view, its policies' allocations) against this model.
//!
//! [`SimRuntime`] drives a connected plugin through the lifecycle with the
//! model in step: every event carries the container as the runtime has it
//! now, and the model is the one [`PluginConn::attach_model`] applies
//! `UpdateContainers` to. Like a real runtime, it calls the plugin only for
//! the events it subscribed to; the model changes either way.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use nri_wasm_api::api as pb;
use protobuf::MessageField;

use crate::reference::{apply_resources, ReferenceRuntime};
use crate::{PluginConn, SimError};

/// Pods and containers, by id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeModel {
    pub pods: BTreeMap<String, pb::PodSandbox>,
    pub containers: BTreeMap<String, pb::Container>,
}

/// A model shared by a test and the simulated Runtime service.
pub type SharedModel = Arc<Mutex<NodeModel>>;

impl NodeModel {
    pub fn shared() -> SharedModel {
        Arc::default()
    }

    /// Applies updates the way the runtime does; returns those naming
    /// containers it does not know (reported back as failed).
    pub fn apply_updates(&mut self, updates: &[pb::ContainerUpdate]) -> Vec<pb::ContainerUpdate> {
        let mut failed = Vec::new();
        for u in updates {
            match self.containers.get_mut(&u.container_id) {
                Some(c) => {
                    if let Some(r) = u.linux.as_ref().and_then(|l| l.resources.as_ref()) {
                        apply_resources(c.linux.mut_or_insert_default().resources.mut_or_insert_default(), r);
                    }
                }
                None => failed.push(u.clone()),
            }
        }
        failed
    }

    /// Creates a container with the plugin's answer, as the runtime would.
    pub fn create(&mut self, req: &pb::CreateContainerRequest, reply: &pb::CreateContainerResponse) -> pb::Container {
        let mut run = ReferenceRuntime::create(req);
        // The reply already passed the plugin's own merge; the runtime's
        // merge of a single plugin cannot conflict.
        run.apply("plugin", reply).expect("a single plugin's reply merges");
        let mut created = run.result().spec;
        created.state = pb::ContainerState::CONTAINER_CREATED.into();
        self.containers.insert(created.id.clone(), created.clone());
        self.apply_updates(&reply.update);
        created
    }

    pub fn set_state(&mut self, id: &str, state: pb::ContainerState) {
        if let Some(c) = self.containers.get_mut(id) {
            c.state = state.into();
        }
    }

    pub fn remove_pod(&mut self, id: &str) {
        self.pods.remove(id);
        self.containers.retain(|_, c| c.pod_sandbox_id != id);
    }

    /// The CPUs of a container's cpuset (empty when none is set).
    pub fn cpuset(&self, id: &str) -> Option<String> {
        let c = self.containers.get(id)?;
        Some(
            c.linux
                .as_ref()
                .and_then(|l| l.resources.as_ref())
                .and_then(|r| r.cpu.as_ref())
                .map_or(String::new(), |c| c.cpus.clone()),
        )
    }
}

/// A runtime driving one plugin with its ground truth in step.
#[derive(Debug)]
pub struct SimRuntime {
    pub conn: PluginConn,
    pub model: SharedModel,
}

impl SimRuntime {
    /// Attaches `model` to a configured connection.
    pub fn new(conn: PluginConn, model: SharedModel) -> Self {
        conn.attach_model(model.clone());
        Self { conn, model }
    }

    /// Closes the connection (the runtime restarts or drops the plugin);
    /// the ground truth lives on.
    pub async fn close(self) -> SharedModel {
        self.conn.close().await;
        self.model
    }

    /// Whether the plugin gets `event` (a runtime skips it otherwise).
    fn gets(&self, event: pb::Event) -> bool {
        self.conn.is_subscribed(event)
    }

    pub fn model(&self) -> std::sync::MutexGuard<'_, NodeModel> {
        self.model.lock().expect("model lock")
    }

    fn pod(&self, id: &str) -> pb::PodSandbox {
        self.model().pods.get(id).cloned().unwrap_or_else(|| panic!("unknown pod {id}"))
    }

    fn container(&self, id: &str) -> (pb::PodSandbox, pb::Container) {
        let c = self.model().containers.get(id).cloned().unwrap_or_else(|| panic!("unknown container {id}"));
        (self.pod(&c.pod_sandbox_id), c)
    }

    /// Synchronize with everything the model holds (after a reconnect).
    pub async fn synchronize(&self) -> Result<(), SimError> {
        let (pods, containers): (Vec<_>, Vec<_>) = {
            let m = self.model();
            (m.pods.values().cloned().collect(), m.containers.values().cloned().collect())
        };
        let updates = self.conn.synchronize(&pods, &containers, 0).await?;
        self.model().apply_updates(&updates);
        Ok(())
    }

    pub async fn run_pod(&self, pod: &pb::PodSandbox) -> Result<(), SimError> {
        if self.gets(pb::Event::RUN_POD_SANDBOX) {
            self.conn.run_pod_sandbox(pod).await?;
        }
        self.model().pods.insert(pod.id.clone(), pod.clone());
        Ok(())
    }

    /// CreateContainer, then PostCreateContainer; the container is in the
    /// model only if the plugin accepted it.
    pub async fn create(&self, container: &pb::Container) -> Result<pb::Container, SimError> {
        let pod = self.pod(&container.pod_sandbox_id);
        let mut container = container.clone();
        container.state = pb::ContainerState::CONTAINER_UNKNOWN.into();
        let reply = match self.gets(pb::Event::CREATE_CONTAINER) {
            true => self.conn.create_container(&pod, &container).await?,
            false => pb::CreateContainerResponse::default(),
        };
        let req = pb::CreateContainerRequest {
            pod: MessageField::some(pod.clone()),
            container: MessageField::some(container),
            ..Default::default()
        };
        let created = self.model().create(&req, &reply);
        if self.gets(pb::Event::POST_CREATE_CONTAINER) {
            self.conn.post_create_container(&pod, &created).await?;
        }
        Ok(created)
    }

    pub async fn start(&self, id: &str) -> Result<(), SimError> {
        let (pod, mut c) = self.container(id);
        if self.gets(pb::Event::START_CONTAINER) {
            self.conn.start_container(&pod, &c).await?;
        }
        self.model().set_state(id, pb::ContainerState::CONTAINER_RUNNING);
        c.state = pb::ContainerState::CONTAINER_RUNNING.into();
        if self.gets(pb::Event::POST_START_CONTAINER) {
            self.conn.post_start_container(&pod, &c).await?;
        }
        Ok(())
    }

    /// UpdateContainer with new resources, as the kubelet asks for them.
    pub async fn update(&self, id: &str, resources: pb::LinuxResources) -> Result<(), SimError> {
        let (pod, c) = self.container(id);
        let req = pb::UpdateContainerRequest {
            pod: MessageField::some(pod.clone()),
            container: MessageField::some(c),
            linux_resources: MessageField::some(resources.clone()),
            ..Default::default()
        };
        let reply = match self.gets(pb::Event::UPDATE_CONTAINER) {
            true => self.conn.update_container(&req).await?,
            false => pb::UpdateContainerResponse::default(),
        };
        {
            let mut m = self.model();
            let own = pb::ContainerUpdate {
                container_id: id.into(),
                linux: MessageField::some(pb::LinuxContainerUpdate {
                    resources: MessageField::some(resources),
                    ..Default::default()
                }),
                ..Default::default()
            };
            m.apply_updates(&[own]);
            m.apply_updates(&reply.update);
        }
        let (pod, c) = self.container(id);
        if self.gets(pb::Event::POST_UPDATE_CONTAINER) {
            self.conn.post_update_container(&pod, &c).await?;
        }
        Ok(())
    }

    pub async fn stop(&self, id: &str) -> Result<(), SimError> {
        let (pod, c) = self.container(id);
        // The container stops whatever the plugin answers.
        let reply = match self.gets(pb::Event::STOP_CONTAINER) {
            true => self.conn.stop_container(&pod, &c).await,
            false => Ok(pb::StopContainerResponse::default()),
        };
        let mut m = self.model();
        m.set_state(id, pb::ContainerState::CONTAINER_STOPPED);
        m.apply_updates(&reply?.update);
        Ok(())
    }

    pub async fn remove(&self, id: &str) -> Result<(), SimError> {
        let (pod, mut c) = self.container(id);
        self.model().containers.remove(id);
        c.state = pb::ContainerState::CONTAINER_STOPPED.into();
        match self.gets(pb::Event::REMOVE_CONTAINER) {
            true => self.conn.remove_container(&pod, &c).await,
            false => Ok(()),
        }
    }

    /// Stops and removes every container of the pod, then the pod.
    pub async fn remove_pod(&self, id: &str) -> Result<(), SimError> {
        let ids: Vec<String> =
            self.model().containers.values().filter(|c| c.pod_sandbox_id == id).map(|c| c.id.clone()).collect();
        for c in &ids {
            self.stop(c).await?;
            self.remove(c).await?;
        }
        let pod = self.pod(id);
        if self.gets(pb::Event::STOP_POD_SANDBOX) {
            self.conn.stop_pod_sandbox(&pod).await?;
        }
        self.model().remove_pod(id);
        match self.gets(pb::Event::REMOVE_POD_SANDBOX) {
            true => self.conn.remove_pod_sandbox(&pod).await,
            false => Ok(()),
        }
    }
}
