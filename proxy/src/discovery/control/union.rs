//! The one registry the request path sees: every cached target's services (one copy per name,
//! the newest) plus the gateway routes, rebuilt off the request path after each change.

use std::{collections::HashMap, sync::Arc};

use super::{target::Answer, Control};
use crate::model::{Gateway, Registry, Service};

/// Merges answers into one registry. A service several targets share is taken from the answer
/// with the highest registry version, so a target that updated first is not undone by one still
/// holding the older copy. Services come out sorted by namespace and name, for stable rebuilds.
pub fn union<'a>(answers: impl IntoIterator<Item = (&'a Answer, bool)>) -> Registry {
    let mut services: HashMap<(&str, &str), (u64, &Service)> = HashMap::new();
    let mut gateway = Gateway::default();
    for (answer, is_gateway) in answers {
        let Answer::Snapshot { version, registry } = answer else {
            continue;
        };
        if is_gateway {
            gateway = registry.gateway.clone();
        }
        for s in &registry.services {
            let slot = services
                .entry((&s.namespace, &s.name))
                .or_insert((*version, s));
            if *version > slot.0 {
                *slot = (*version, s);
            }
        }
    }
    let mut services: Vec<_> = services.into_iter().collect();
    services.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Registry {
        services: services.into_iter().map(|(_, (_, s))| s.clone()).collect(),
        gateway,
    }
}

/// Rebuilds and publishes the union each time an answer or the target set changes.
pub(super) async fn run(control: Arc<Control>) {
    loop {
        control.rebuild.notified().await;
        let (generation, answers) = control.answers();
        let registry = union(answers.iter().map(|(a, g)| (a, *g)));
        if let Some(registry) = control.publish(generation, registry) {
            control.registry_tx.send_replace(registry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Endpoint;

    fn service(name: &str, endpoint: &str) -> Service {
        let doc =
            format!("services: [{{ name: {name}, endpoints: [{{ address: \"{endpoint}\" }}] }}]");
        crate::discovery::registry_file::parse("t", &doc)
            .expect("valid")
            .services
            .remove(0)
    }

    fn snapshot(version: u64, services: Vec<Service>) -> Answer {
        Answer::Snapshot {
            version,
            registry: Arc::new(Registry {
                services,
                gateway: Gateway::default(),
            }),
        }
    }

    fn addresses(s: &Service) -> Vec<String> {
        s.endpoints
            .iter()
            .map(|e: &Endpoint| e.address.to_string())
            .collect()
    }

    #[test]
    fn a_shared_service_appears_once_in_its_newest_version() {
        let old = snapshot(
            3,
            vec![service("web", "127.0.0.1:1"), service("db", "127.0.0.1:5")],
        );
        let new = snapshot(4, vec![service("web", "127.0.0.1:2")]);
        let none = Answer::NoSuchTarget { version: 4 };
        for order in [[&old, &new, &none], [&none, &new, &old]] {
            let reg = union(order.into_iter().map(|a| (a, false)));
            let names: Vec<_> = reg.services.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(names, ["db", "web"]);
            assert_eq!(addresses(&reg.services[1]), ["127.0.0.1:2"]);
        }
    }

    #[test]
    fn gateway_routes_come_from_the_gateway_target_only() {
        let doc = "services: [{ name: web }]\ngateway: { routes: [{ name: edge, backendRefs: [{ name: web }] }] }";
        let with_routes = Answer::Snapshot {
            version: 1,
            registry: Arc::new(crate::discovery::registry_file::parse("t", doc).expect("valid")),
        };
        assert!(union([(&with_routes, false)]).gateway.routes.is_empty());
        assert_eq!(union([(&with_routes, true)]).gateway.routes[0].name, "edge");
    }
}
