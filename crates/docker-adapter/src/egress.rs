//! The network side of `terminal.docker_egress`: berth's internal network (no route out) and the proxy container
//! that is the only way out of it, attached to that network at a fixed address and to a normal network.
//!
//! The internal network's bridge has no address of the host's (`com.docker.network.bridge.inhibit_ipv4`): an
//! internal network only drops forwarded packets, so a gateway address on the bridge would be the host itself, every
//! host service listening on 0.0.0.0 a sandbox's for the asking. Without it nothing on the host answers on that
//! network (not even ARP), and the proxy, a container on both networks, needs none.

use std::collections::HashMap;

use async_trait::async_trait;
use bollard::models::{
    ContainerCreateBody, EndpointIpamConfig, EndpointSettings, HostConfig, HostConfigLogConfig, Ipam, IpamConfig,
    NetworkConnectRequest, NetworkCreateRequest, NetworkDisconnectRequest, NetworkingConfig, RestartPolicy,
    RestartPolicyNameEnum,
};
use bollard::query_parameters::{CreateContainerOptions, InspectContainerOptions, StartContainerOptions};
use domain::egress::EgressRoute;
use domain::ports::{EgressNetworks, EgressSetup, RuntimeError};

use crate::DockerRuntime;

/// Where the binary lands inside the proxy container (what an exec there runs, as `berth egress-credentials`).
pub const PROXY_EXE: &str = "/usr/local/bin/berth-egress";

/// The bridge driver's option that leaves the bridge without an IPv4 address of the host's (Docker 20.10 on).
const INHIBIT_IPV4: &str = "com.docker.network.bridge.inhibit_ipv4";

#[async_trait]
impl EgressNetworks for DockerRuntime {
    /// Makes sure the internal network and its running proxy exist; returns where sandboxes attach.
    ///
    /// # Errors
    /// A mapped [`RuntimeError`], or `Api` with one line when the proxy does not stay up.
    async fn ensure_egress(&self, setup: &EgressSetup) -> Result<EgressRoute, RuntimeError> {
        let subnet = self.ensure_network(setup).await?;
        let proxy_ip = proxy_address(&subnet)
            .ok_or_else(|| api(format!("egress network {} has an unusable subnet {subnet:?}", setup.name)))?;
        self.ensure_proxy(setup, &proxy_ip).await?;
        self.retire_first_layout(setup).await;
        Ok(EgressRoute { network: setup.name.clone(), proxy_ip })
    }

    /// Whether the proxy `name` is running; with its last words when it is not (a binary the image cannot run).
    ///
    /// # Errors
    /// A mapped [`RuntimeError`].
    async fn proxy_down(&self, name: &str) -> Result<Option<String>, RuntimeError> {
        let c = self
            .docker
            .inspect_container(name, None::<InspectContainerOptions>)
            .await
            .map_err(|e| self.map_err("inspect", name, e))?;
        let running = c.state.as_ref().and_then(|s| s.running) == Some(true);
        let restarting = c.state.as_ref().and_then(|s| s.restarting) == Some(true);
        if running && !restarting {
            return Ok(None);
        }
        let words = self.tail_text(name).await;
        Ok(Some(words))
    }

    /// The address `container` has on `network`, from its inspect.
    ///
    /// # Errors
    /// A mapped [`RuntimeError`].
    async fn address_on(&self, container: &str, network: &str) -> Result<Option<String>, RuntimeError> {
        let c = self
            .docker
            .inspect_container(container, None::<InspectContainerOptions>)
            .await
            .map_err(|e| self.map_err("inspect", container, e))?;
        let networks = c.network_settings.and_then(|n| n.networks).unwrap_or_default();
        Ok(networks.get(network).and_then(|n| n.ip_address.clone()).filter(|ip| !ip.is_empty()))
    }
}

impl DockerRuntime {
    /// The internal network's subnet, creating the network on a free /24 of 10.213.0.0/16 when missing.
    async fn ensure_network(&self, setup: &EgressSetup) -> Result<String, RuntimeError> {
        for attempt in 0..32u16 {
            if let Some(subnet) = self.network_subnet(&setup.name).await? {
                return Ok(subnet);
            }
            let third = (u16::from(setup.seed) + attempt * 7) % 256;
            let subnet = format!("10.213.{third}.0/24");
            let request = NetworkCreateRequest {
                name: setup.name.clone(),
                driver: Some("bridge".into()),
                internal: Some(true),
                options: Some(HashMap::from([(INHIBIT_IPV4.to_owned(), "true".to_owned())])),
                labels: Some(setup.labels.clone()),
                ipam: Some(Ipam {
                    config: Some(vec![IpamConfig {
                        subnet: Some(subnet.clone()),
                        // Sandboxes get addresses from the upper half; the proxy's .2 is never handed out.
                        ip_range: Some(format!("10.213.{third}.128/25")),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            };
            match self.docker.create_network(request).await {
                Ok(_) => return Ok(subnet),
                // Taken by a network of someone else's (try the next /24), or made meanwhile by a sibling (read it).
                // Engines before API 1.44 do not refuse a second network of the same name unless asked, and bollard
                // cannot ask; a sibling racing on the same name tries the same subnets in the same order, so its
                // create fails on the overlap instead, and the next turn reads the winner's network.
                Err(bollard::errors::Error::DockerResponseServerError { message, .. })
                    if message.contains("overlap") || message.contains("already exists") => {}
                Err(e) => return Err(self.map_err("create network", &setup.name, e)),
            }
        }
        Err(api(format!("no free subnet in 10.213.0.0/16 for egress network {}", setup.name)))
    }

    async fn network_subnet(&self, name: &str) -> Result<Option<String>, RuntimeError> {
        match self.docker.inspect_network(name, None).await {
            Ok(n) => Ok(n.ipam.and_then(|i| i.config).and_then(|c| c.into_iter().find_map(|c| c.subnet))),
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(None),
            Err(e) => Err(self.map_err("inspect network", name, e)),
        }
    }

    /// Starts the proxy container, creating it first when missing (a sibling's create wins the name race).
    async fn ensure_proxy(&self, setup: &EgressSetup, proxy_ip: &str) -> Result<(), RuntimeError> {
        let name = format!("{}-proxy", setup.name);
        for _ in 0..3 {
            match self.docker.inspect_container(&name, None::<InspectContainerOptions>).await {
                Ok(c) if c.state.as_ref().and_then(|s| s.running) == Some(true) => return Ok(()),
                Ok(_) => {
                    return self.start_proxy(&name).await;
                }
                Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {}
                Err(e) => return Err(self.map_err("inspect", &name, e)),
            }
            match self.create_proxy(setup, &name, proxy_ip).await {
                Ok(()) => return self.start_proxy(&name).await,
                Err(RuntimeError::NameConflict(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Err(api(format!("the egress proxy {name} could not be created")))
    }

    async fn create_proxy(&self, setup: &EgressSetup, name: &str, proxy_ip: &str) -> Result<(), RuntimeError> {
        let mut cmd = vec![PROXY_EXE.to_owned()];
        cmd.extend(setup.args.iter().cloned());
        // It serves the inside leg only: on the outside network any container could ask it, and write denial rows.
        cmd.extend(["--listen".to_owned(), proxy_ip.to_owned()]);
        let body = ContainerCreateBody {
            image: Some(setup.image.clone()),
            cmd: Some(cmd),
            entrypoint: Some(Vec::new()),
            labels: Some(setup.labels.clone()),
            user: setup.user.clone(),
            host_config: Some(HostConfig {
                binds: Some(vec![format!("{}:{PROXY_EXE}:ro", setup.exe), format!("{}:/egress", setup.log_dir)]),
                network_mode: Some(setup.name.clone()),
                cap_drop: Some(vec!["ALL".into()]),
                security_opt: Some(vec!["no-new-privileges".into()]),
                readonly_rootfs: Some(true),
                // The DNS port (53) without a capability: the proxy runs as the caller's user.
                sysctls: Some(HashMap::from([("net.ipv4.ip_unprivileged_port_start".into(), "0".into())])),
                restart_policy: Some(RestartPolicy {
                    name: Some(RestartPolicyNameEnum::UNLESS_STOPPED),
                    maximum_retry_count: None,
                }),
                pids_limit: Some(256),
                // Its own output (a line per denial) bounded like its denial log: the engine keeps 2 × 1 MiB.
                log_config: Some(HostConfigLogConfig {
                    typ: Some("json-file".into()),
                    config: Some(HashMap::from([
                        ("max-size".to_owned(), "1m".to_owned()),
                        ("max-file".to_owned(), "2".to_owned()),
                    ])),
                }),
                ..Default::default()
            }),
            networking_config: Some(NetworkingConfig {
                endpoints_config: Some(HashMap::from([(
                    setup.name.clone(),
                    EndpointSettings {
                        ipam_config: Some(EndpointIpamConfig {
                            ipv4_address: Some(proxy_ip.to_owned()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                )])),
            }),
            ..Default::default()
        };
        let options = CreateContainerOptions { name: Some(name.to_owned()), ..Default::default() };
        if let Err(e) = self.docker.create_container(Some(options), body).await {
            return Err(self.map_err("create", name, e));
        }
        let connect = NetworkConnectRequest { container: name.to_owned(), endpoint_config: None };
        if let Err(e) = self.docker.connect_network(&setup.outside, connect).await {
            let _ = self.docker.remove_container(name, None).await;
            return Err(api(format!(
                "the egress proxy cannot join network {:?} (terminal.docker_egress_network): {}",
                setup.outside,
                self.map_err("connect", name, e)
            )));
        }
        Ok(())
    }

    async fn start_proxy(&self, name: &str) -> Result<(), RuntimeError> {
        match self.docker.start_container(name, None::<StartContainerOptions>).await {
            Ok(()) => {}
            // Started meanwhile by a sibling.
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 304, .. }) => {}
            Err(e) => return Err(self.map_err("start", name, e)),
        }
        Ok(())
    }
}

impl DockerRuntime {
    /// Retires this home's egress networks of the first layout (a bridge with a host address, which let a sandbox
    /// reach every host service): each one's proxy removed, every container still on it disconnected (a sandbox there
    /// is recreated on its next use, its network no longer the policy's), the network removed. Best effort: what
    /// fails is tried again at the next setup.
    async fn retire_first_layout(&self, setup: &EgressSetup) {
        let Some(home) = setup.labels.get(domain::label::LABEL_HOME) else { return };
        let filters = HashMap::from([(
            "label".to_owned(),
            vec![format!("{}={home}", domain::label::LABEL_HOME), domain::egress::LABEL_EGRESS_PROXY.to_owned()],
        )]);
        let options = bollard::query_parameters::ListNetworksOptions { filters: Some(filters) };
        let Ok(networks) = self.docker.list_networks(Some(options)).await else { return };
        for n in networks {
            let Some(name) = n.name else { continue };
            if n.options.as_ref().and_then(|o| o.get(INHIBIT_IPV4)).is_some_and(|v| v == "true") || name == setup.name {
                continue;
            }
            let force = bollard::query_parameters::RemoveContainerOptions { force: true, ..Default::default() };
            let _ = self.docker.remove_container(&format!("{name}-proxy"), Some(force)).await;
            let attached = self.docker.inspect_network(&name, None).await.ok().and_then(|n| n.containers);
            for id in attached.unwrap_or_default().into_keys() {
                let request = NetworkDisconnectRequest { container: id, force: Some(true) };
                let _ = self.docker.disconnect_network(&name, request).await;
            }
            let _ = self.docker.remove_network(&name).await;
        }
    }

    /// The last lines a container wrote, as one line of text.
    async fn tail_text(&self, name: &str) -> String {
        use futures_util::StreamExt;
        let options = bollard::query_parameters::LogsOptionsBuilder::new().stdout(true).stderr(true).tail("5").build();
        let mut stream = self.docker.logs(name, Some(options));
        let mut text = String::new();
        while let Some(Ok(item)) = stream.next().await {
            text.push_str(&String::from_utf8_lossy(&item.into_bytes()));
        }
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    }
}

/// The proxy's fixed address: `.2` of the network's subnet (the engine keeps `.1` for the gateway).
fn proxy_address(subnet: &str) -> Option<String> {
    let (base, _) = subnet.split_once('/')?;
    let ip: std::net::Ipv4Addr = base.parse().ok()?;
    Some(std::net::Ipv4Addr::from(u32::from(ip) + 2).to_string())
}

fn api(message: String) -> RuntimeError {
    RuntimeError::Api { status: 500, message }
}
