//! The `weir.discovery.v1.Discovery` gRPC service by hand, as tonic's codegen would write it but
//! with a codec that sends already-encoded `Update` bytes: every stream on a target shares one
//! encoding instead of cloning and re-encoding the message per stream.

use std::{convert::Infallible, sync::Arc};

use bytes::{BufMut, Bytes};
use prost::Message;
use tonic::{
    codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder},
    codegen::{http, Body, BoxFuture, Context, Poll, Service, StdError},
    server::{Grpc, NamedService, ServerStreamingService},
    Status,
};
use weir_proto::discovery as pb;

use super::{WatchStream, Watcher};

const WATCH_PATH: &str = "/weir.discovery.v1.Discovery/Watch";

/// The Discovery service, ready for `tonic::transport::Server::add_service`.
#[derive(Debug, Clone)]
pub struct DiscoveryServer {
    watcher: Arc<Watcher>,
}

impl DiscoveryServer {
    pub(super) fn new(watcher: Watcher) -> Self {
        Self {
            watcher: Arc::new(watcher),
        }
    }
}

impl NamedService for DiscoveryServer {
    const NAME: &'static str = "weir.discovery.v1.Discovery";
}

impl<B> Service<http::Request<B>> for DiscoveryServer
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != WATCH_PATH {
            return Box::pin(async { Ok(Status::unimplemented("no such method").into_http()) });
        }
        let method = WatchMethod(self.watcher.clone());
        Box::pin(async move { Ok(Grpc::new(WatchCodec).server_streaming(method, req).await) })
    }
}

struct WatchMethod(Arc<Watcher>);

impl ServerStreamingService<pb::WatchRequest> for WatchMethod {
    type Response = Bytes;
    type ResponseStream = WatchStream;
    type Future = BoxFuture<tonic::Response<WatchStream>, Status>;

    fn call(&mut self, request: tonic::Request<pb::WatchRequest>) -> Self::Future {
        let result = self.0.open(request).map(tonic::Response::new);
        Box::pin(async move { result })
    }
}

/// Decodes `WatchRequest`s; encodes `Update`s that are already bytes.
struct WatchCodec;

impl Codec for WatchCodec {
    type Encode = Bytes;
    type Decode = pb::WatchRequest;
    type Encoder = PreEncoded;
    type Decoder = RequestDecoder;

    fn encoder(&mut self) -> PreEncoded {
        PreEncoded
    }

    fn decoder(&mut self) -> RequestDecoder {
        RequestDecoder
    }
}

struct PreEncoded;

impl Encoder for PreEncoded {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

struct RequestDecoder;

impl Decoder for RequestDecoder {
    type Item = pb::WatchRequest;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<pb::WatchRequest>, Status> {
        pb::WatchRequest::decode(src)
            .map(Some)
            .map_err(|e| Status::invalid_argument(format!("bad WatchRequest: {e}")))
    }
}
