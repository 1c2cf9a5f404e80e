//! The domain model shared by every stage: services, endpoints, routes, policy. Deserialized
//! straight from the registry file (YAML, camelCase, unknown fields refused); protobuf converts
//! into these types at the boundary. This file holds the registry and its services; routes,
//! filters, policy and the validated scalar types have a file each.

mod filter;
mod policy;
mod route;
mod values;

use std::{collections::HashMap, net::SocketAddr};

use serde::{Deserialize, Serialize};

pub use filter::*;
pub use policy::*;
pub use route::*;
pub use values::*;

/// A whole registry: what the file holds, validated, published as one `Arc<Registry>`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Registry {
    #[serde(default)]
    pub services: Vec<Service>,
    #[serde(default)]
    pub gateway: Gateway,
}

/// Edge routes served on the gateway listener.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Gateway {
    #[serde(default)]
    pub routes: Vec<Route>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Service {
    pub name: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Authorities (Host / :authority, without port) that name this service.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Virtual addresses transparent clients dial.
    #[serde(default)]
    pub addresses: Vec<SocketAddr>,
    #[serde(default)]
    pub app_protocol: Option<AppProtocol>,
    #[serde(default)]
    pub endpoints: Vec<Endpoint>,
    #[serde(default)]
    pub routes: Vec<Route>,
    #[serde(default)]
    pub policy: Policy,
}

pub fn default_namespace() -> String {
    "default".to_string()
}

/// What protocol a service's endpoints speak, when it differs from what the client spoke.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AppProtocol {
    Http,
    H2c,
    Grpc,
    Tcp,
    Tls,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Endpoint {
    pub address: SocketAddr,
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Expected peer identity (SPIFFE id), checked once mTLS lands.
    #[serde(default)]
    pub identity: Option<String>,
    #[serde(default, deserialize_with = "values::unique_keys")]
    pub labels: HashMap<String, String>,
    #[serde(default = "default_true")]
    pub ready: bool,
}

pub fn default_weight() -> u32 {
    1
}
fn default_true() -> bool {
    true
}

impl Service {
    /// `name.namespace`, the key metrics and logs use.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.name, self.namespace)
    }
}
