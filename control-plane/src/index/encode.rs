//! Wire encoding of discovery updates from pre-encoded parts. A `Snapshot` is a sequence of
//! length-delimited fields, so each service (and the gateway routes) is translated and encoded
//! once when it changes, and a target's update is those bytes concatenated: no per-stream
//! translation, cloning or re-encoding.

use bytes::{BufMut, Bytes, BytesMut};
use prost::{
    encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType},
    Message,
};
use weir_proto::discovery as pb;
use weir_proxy::model;

use crate::api::translate;

/// `Snapshot.services` (field 1) entry for one service.
pub fn service_block(s: &model::Service) -> Bytes {
    let mut buf = BytesMut::new();
    put_field(1, &translate::service(s), &mut buf);
    buf.freeze()
}

/// `Snapshot.gateway_routes` (field 2) entries, in order.
pub fn gateway_block(routes: &[model::Route]) -> Bytes {
    let mut buf = BytesMut::new();
    for r in routes {
        put_field(2, &translate::route(r), &mut buf);
    }
    buf.freeze()
}

fn put_field(tag: u32, msg: &impl Message, buf: &mut BytesMut) {
    let len = msg.encoded_len();
    buf.reserve(key_len(tag) + encoded_len_varint(len as u64) + len);
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(len as u64, buf);
    msg.encode_raw(buf);
}

/// An `Update { version, snapshot }` whose snapshot is `blocks` (field entries) concatenated.
pub fn snapshot_update<'a>(version: u64, blocks: impl Iterator<Item = &'a Bytes> + Clone) -> Bytes {
    let body: usize = blocks.clone().map(Bytes::len).sum();
    let mut buf = BytesMut::with_capacity(24 + body);
    if version != 0 {
        encode_key(1, WireType::Varint, &mut buf);
        encode_varint(version, &mut buf);
    }
    encode_key(2, WireType::LengthDelimited, &mut buf);
    encode_varint(body as u64, &mut buf);
    for b in blocks {
        buf.put_slice(b);
    }
    buf.freeze()
}

/// An `Update { version, no_such_target }`.
pub fn not_found_update(version: u64, reason: &str) -> Bytes {
    pb::Update {
        version,
        result: Some(pb::update::Result::NoSuchTarget(pb::NoSuchTarget {
            reason: reason.to_string(),
        })),
    }
    .encode_to_vec()
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"
services:
  - name: web
    hosts: [web]
    endpoints: [{ address: "127.0.0.1:8080", labels: { zone: a } }]
    routes:
      - name: split
        backendRefs: [{ name: web, weight: 1 }]
  - name: api
gateway:
  routes:
    - name: edge
      matches: [{ path: { type: PathPrefix, value: / } }]
      backendRefs: [{ name: web }]
"#;

    #[test]
    fn a_concatenated_snapshot_decodes_as_the_prost_built_update() {
        let reg = weir_proxy::discovery::registry_file::parse("t.yaml", DOC).expect("valid doc");
        let blocks = [
            service_block(&reg.services[0]),
            service_block(&reg.services[1]),
            gateway_block(&reg.gateway.routes),
        ];
        let bytes = snapshot_update(7, blocks.iter());
        let want = pb::Update {
            version: 7,
            result: Some(pb::update::Result::Snapshot(pb::Snapshot {
                services: reg.services.iter().map(translate::service).collect(),
                gateway_routes: reg.gateway.routes.iter().map(translate::route).collect(),
            })),
        };
        assert_eq!(pb::Update::decode(bytes).expect("decodes"), want);
    }

    #[test]
    fn an_empty_snapshot_is_still_a_snapshot() {
        let update = pb::Update::decode(snapshot_update(1, [].iter())).expect("decodes");
        assert_eq!(
            update.result,
            Some(pb::update::Result::Snapshot(pb::Snapshot::default()))
        );
    }
}
