//! thrust's native transport: the RocketMQ 5 gRPC calls on tonic and tokio, handed to asyncio in batches.
//!
//! The shape (docs/architecture.md, "The native transport"):
//! - One tokio runtime per process, created on first use; a fork child that uses the transport gets a
//!   runtime of its own (the parent's threads do not exist there, and its runtime is leaked, never dropped).
//! - A `Hub` belongs to one asyncio client: completed calls are queued in it, and one byte on a socket pair
//!   wakes the event loop once for however many completed meanwhile (`Hub::drain`). tokio's threads never
//!   take the GIL: every Python object is built in `drain`, on the loop's thread.
//! - A `Channel` is one HTTP/2 connection to one endpoint (tonic, reconnecting on demand), and carries
//!   every RPC of `apache.rocketmq.v2.MessagingService`: unary calls as serialized bytes both ways (Python
//!   builds and parses them with its protobuf runtime), ReceiveMessage decoded here (digest check and
//!   decompression included, off the GIL) into the values `thrust.ReceivedMessage` is built from, and the
//!   Telemetry stream as bytes.
//! - A call waits for its connection within a budget the caller gives (nothing was sent while connecting,
//!   so trying again is safe), as the grpcio transport waits for READY (`thrust._io.rpc.RpcClient`).

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Buf, BufMut, Bytes};
use http::uri::{PathAndQuery, Uri};
use prost::Message as _;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::transport::{ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Status};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[allow(clippy::all, dead_code)]
mod pb {
    include!(concat!(env!("OUT_DIR"), "/apache.rocketmq.v2.rs"));
}

const SERVICE: &str = "/apache.rocketmq.v2.MessagingService/";
/// The request id header (`thrust._io.metadata`): a receive that renews its empty polls gives each its own.
const REQUEST_ID: &str = "x-mq-request-id";
/// `thrust._codec.convert.MAX_DECOMPRESSED_SIZE`: a GZIP body may not inflate beyond it.
const MAX_DECOMPRESSED_SIZE: u64 = 130 * 1024 * 1024;
/// The proxy's minimum long poll (`thrust._core.settings.MIN_POLLING_SECONDS`).
const MIN_POLLING_SECONDS: f64 = 5.0;

// -- the runtime ----------------------------------------------------------------------------------------

struct ProcessRuntime {
    pid: u32,
    runtime: Arc<Runtime>,
}

// Only ever locked with the GIL held, so a fork (which Python performs holding the GIL) never copies it
// locked into the child.
static RUNTIME: Mutex<Option<ProcessRuntime>> = Mutex::new(None);

fn worker_threads() -> usize {
    std::env::var("THRUST_NATIVE_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(1)
}

/// This process's id, kept so that the per-call fork check costs no system call (getpid is one: glibc
/// caches it no more); 0 until first asked, and again in a forked child (`forget_pid`, run by fork).
static PID: AtomicU32 = AtomicU32::new(0);
static AT_FORK: std::sync::Once = std::sync::Once::new();

extern "C" fn forget_pid() {
    // Runs in the child right after fork(): only an atomic store, which is async-signal-safe.
    PID.store(0, Ordering::Relaxed);
}

fn process_id() -> u32 {
    let pid = PID.load(Ordering::Relaxed);
    if pid != 0 {
        return pid;
    }
    AT_FORK.call_once(|| {
        // SAFETY: the handler only stores to an atomic. (pthread_atfork fails only without memory.)
        unsafe {
            libc::pthread_atfork(None, None, Some(forget_pid));
        }
    });
    let pid = std::process::id();
    PID.store(pid, Ordering::Relaxed);
    pid
}

fn runtime() -> PyResult<Arc<Runtime>> {
    let pid = process_id();
    let mut guard = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(current) = guard.as_ref() {
        if current.pid == pid {
            return Ok(current.runtime.clone());
        }
    }
    if let Some(inherited) = guard.take() {
        // A fork child: the parent's worker threads were not copied, so dropping its runtime would wait
        // for them forever. Leak it.
        std::mem::forget(inherited);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads())
        .thread_name("thrust-native")
        .enable_all()
        .build()
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start the native runtime: {e}")))?;
    let runtime = Arc::new(runtime);
    *guard = Some(ProcessRuntime {
        pid,
        runtime: runtime.clone(),
    });
    Ok(runtime)
}

fn check_same_process(pid: u32, what: &str) -> PyResult<()> {
    if pid != process_id() {
        return Err(PyRuntimeError::new_err(format!(
            "this {what} was created in the parent of this forked process and cannot be used here: \
             create a new client in the child"
        )));
    }
    Ok(())
}

// -- completions -----------------------------------------------------------------------------------------

/// A failed call: the gRPC code and message, and whether it failed while connecting (nothing was sent).
struct Failure {
    code: i32,
    message: String,
    connect: bool,
}

impl Failure {
    fn from_status(status: &Status) -> Self {
        // A status with a source was made here from a transport error (an HTTP/2, TLS or socket failure),
        // not sent by the server: tonic calls some of those UNKNOWN, which gRPC core and grpc-java call
        // UNAVAILABLE, a failure a retry may cure. It calls a connection closed under a call CANCELLED
        // ("connection closed": with TLS 1.3 a server that refuses the client's certificate does so after
        // the client finished its handshake, so the first call meets the close); gRPC core reports that
        // as UNAVAILABLE too. Only a CANCELLED the server sent (RST_STREAM CANCEL) stays CANCELLED.
        // tonic's own deadline (the request's grpc-timeout) ends a call CANCELLED "Timeout expired", with
        // a transport error as its source: gRPC core reports DEADLINE_EXCEEDED, as `deadline` does.
        let transport = std::error::Error::source(status).is_some();
        let timed_out = transport && has_source::<tonic::TimeoutExpired>(status);
        let code = reported_code(
            status.code(),
            transport,
            transport && is_remote_reset(status),
            timed_out,
        );
        if timed_out {
            return Failure::deadline();
        }
        Failure {
            code: code as i32,
            message: describe(status),
            connect: is_connect_error(status),
        }
    }
    fn deadline() -> Self {
        Failure {
            code: Code::DeadlineExceeded as i32,
            message: "Deadline Exceeded".into(),
            connect: false,
        }
    }
}

/// One received message, decoded and checked off the GIL.
struct Decoded {
    topic: String,
    body: Bytes,
    message_id: String,
    receipt_handle: String,
    tag: Option<String>,
    keys: Vec<String>,
    properties: Vec<(String, String)>,
    message_group: Option<String>,
    delivery_attempt: i32,
    born_timestamp: Option<f64>,
    store_timestamp: Option<f64>,
    delivery_timestamp: Option<f64>,
    born_host: String,
    queue_id: i32,
    queue_offset: Option<i64>,
    message_type: i32,
    priority: Option<i32>,
    trace_context: Option<String>,
    lite_topic: Option<String>,
    corrupt: Option<String>,
}

enum Done {
    Unary {
        token: u64,
        result: Result<Bytes, Failure>,
    },
    Receive {
        token: u64,
        code: i32,
        text: String,
        delivery: Option<f64>,
        messages: Vec<Decoded>,
        failure: Option<Failure>,
        endpoint: Arc<Py<PyAny>>,
    },
    /// The first message after a ReceiveMessage's OK status, handed over while the stream goes on (the
    /// receive asked for it: `thrust._push.receiver._Stream`).
    ReceiveFirst {
        token: u64,
        message: Decoded,
        endpoint: Arc<Py<PyAny>>,
    },
    TelemetryItem {
        token: u64,
        data: Bytes,
    },
    TelemetryEnd {
        token: u64,
        failure: Option<Failure>,
    },
    /// The call was cancelled by its channel's close.
    Cancelled {
        token: u64,
    },
}

struct HubShared {
    pid: u32,
    queue: Mutex<Vec<Done>>,
    notified: AtomicBool,
    closed: AtomicBool,
    writer: UnixStream,
    reader: UnixStream,
}

impl HubShared {
    fn push(&self, done: Done) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(done);
        // One byte per wake-up, not per completion (`drain` says in which order it clears `notified`).
        if !self.notified.swap(true, Ordering::SeqCst) {
            let _ = (&self.writer).write(&[1]);
        }
    }
}

/// The Python values a hub builds received messages with (`thrust._io.native` passes them once).
struct Factory {
    received: Py<PyAny>,
    corrupted: Py<PyAny>,
    message_types: Py<PyDict>,
    normal: Py<PyAny>,
    mapping_proxy: Py<PyAny>,
    empty: Py<PyAny>,
}

/// Completed calls of one asyncio client, and the socket whose readability says there are some.
#[pyclass(frozen, module = "thrust_native")]
struct Hub {
    shared: Arc<HubShared>,
    factory: Factory,
    runtime: Arc<Runtime>,
}

#[pymethods]
impl Hub {
    #[new]
    fn new(
        received: Py<PyAny>,
        corrupted: Py<PyAny>,
        message_types: Py<PyDict>,
        normal: Py<PyAny>,
        mapping_proxy: Py<PyAny>,
        empty: Py<PyAny>,
    ) -> PyResult<Self> {
        let (reader, writer) = UnixStream::pair()?;
        reader.set_nonblocking(true)?;
        writer.set_nonblocking(true)?;
        Ok(Hub {
            shared: Arc::new(HubShared {
                pid: process_id(),
                queue: Mutex::new(Vec::new()),
                notified: AtomicBool::new(false),
                closed: AtomicBool::new(false),
                writer,
                reader,
            }),
            factory: Factory {
                received,
                corrupted,
                message_types,
                normal,
                mapping_proxy,
                empty,
            },
            runtime: runtime()?,
        })
    }

    /// The file descriptor the event loop watches (`loop.add_reader`).
    fn fileno(&self) -> i32 {
        self.shared.reader.as_raw_fd()
    }

    /// Every completion queued since the last drain, as `(token, kind, payload)` tuples:
    /// kind 0 a unary response (bytes), 1 a unary failure `(code, message, connect)`, 2 a finished
    /// ReceiveMessage `(status code, status message, delivery timestamp, messages, corrupted, failure or
    /// None)`,
    /// 3 a Telemetry command (bytes), 4 the Telemetry stream's end (failure or None), 5 the call was
    /// cancelled by its channel's close (None), 6 the first message of a receive that is still streaming.
    fn drain<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let shared = &self.shared;
        check_same_process(shared.pid, "client")?;
        // The order matters: bytes first, then `notified`, then the queue. Clearing `notified` before
        // reading would let this drain swallow the byte of a push that set it again meanwhile; a later push
        // would then see `notified` set with no byte left to wake the loop, and its call would never
        // complete. Read first, a completion pushed after the clear writes a byte of its own (at worst one
        // spurious wake-up finds the queue empty).
        let mut scratch = [0u8; 64];
        while let Ok(n) = (&shared.reader).read(&mut scratch) {
            if n < scratch.len() {
                break;
            }
        }
        shared.notified.store(false, Ordering::SeqCst);
        let items = std::mem::take(&mut *shared.queue.lock().unwrap_or_else(|e| e.into_inner()));
        let out = PyList::empty(py);
        for item in items {
            let tuple = match item {
                Done::Unary {
                    token,
                    result: Ok(data),
                } => (token, 0u8, PyBytes::new(py, &data).into_any()).into_pyobject(py)?,
                Done::Unary {
                    token,
                    result: Err(f),
                } => (token, 1u8, failure_py(py, &f)?).into_pyobject(py)?,
                Done::Receive {
                    token,
                    code,
                    text,
                    delivery,
                    messages,
                    failure,
                    endpoint,
                } => {
                    let good = PyList::empty(py);
                    let bad = PyList::empty(py);
                    for m in messages {
                        if m.corrupt.is_some() {
                            bad.append(self.build(py, m, &endpoint)?)?;
                        } else {
                            good.append(self.build(py, m, &endpoint)?)?;
                        }
                    }
                    let failure = match failure {
                        Some(f) => failure_py(py, &f)?,
                        None => py.None().into_bound(py),
                    };
                    let payload = (code, text, delivery, good, bad, failure).into_pyobject(py)?;
                    (token, 2u8, payload.into_any()).into_pyobject(py)?
                }
                Done::TelemetryItem { token, data } => {
                    (token, 3u8, PyBytes::new(py, &data).into_any()).into_pyobject(py)?
                }
                Done::ReceiveFirst {
                    token,
                    message,
                    endpoint,
                } => (token, 6u8, self.build(py, message, &endpoint)?).into_pyobject(py)?,
                Done::Cancelled { token } => {
                    (token, 5u8, py.None().into_bound(py)).into_pyobject(py)?
                }
                Done::TelemetryEnd { token, failure } => {
                    let failure = match failure {
                        Some(f) => failure_py(py, &f)?,
                        None => py.None().into_bound(py),
                    };
                    (token, 4u8, failure).into_pyobject(py)?
                }
            };
            out.append(tuple)?;
        }
        Ok(out)
    }

    /// Stop taking completions (the client closed); idempotent.
    fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

fn failure_py<'py>(py: Python<'py>, f: &Failure) -> PyResult<Bound<'py, PyAny>> {
    Ok((f.code, f.message.as_str(), f.connect)
        .into_pyobject(py)?
        .into_any())
}

impl Hub {
    /// A `thrust.ReceivedMessage` (or a `Corrupted`) from a decoded message. The slots are set as the
    /// class's `__init__` sets them, without running it: `object.__setattr__` is what it calls.
    fn build<'py>(
        &self,
        py: Python<'py>,
        m: Decoded,
        endpoint: &Py<PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let f = &self.factory;
        if let Some(reason) = m.corrupt {
            return f
                .corrupted
                .bind(py)
                .call1((m.message_id, m.topic, m.receipt_handle, reason));
        }
        let cls = f.received.bind(py);
        let obj = cls.call_method1(pyo3::intern!(py, "__new__"), (cls,))?;
        let properties = if m.properties.is_empty() {
            f.empty.bind(py).clone()
        } else {
            let d = PyDict::new(py);
            for (k, v) in m.properties {
                d.set_item(k, v)?;
            }
            f.mapping_proxy.bind(py).call1((d,))?
        };
        let message_type = match f.message_types.bind(py).get_item(m.message_type)? {
            Some(t) => t,
            None => f.normal.bind(py).clone(),
        };
        let keys = PyTuple::new(py, m.keys)?;
        let set =
            |name: &Bound<'py, pyo3::types::PyString>, value: Bound<'py, PyAny>| -> PyResult<()> {
                // SAFETY: three valid object pointers; the call borrows them.
                let rc = unsafe {
                    pyo3::ffi::PyObject_GenericSetAttr(obj.as_ptr(), name.as_ptr(), value.as_ptr())
                };
                if rc != 0 {
                    return Err(PyErr::fetch(py));
                }
                Ok(())
            };
        set(
            pyo3::intern!(py, "topic"),
            m.topic.into_pyobject(py)?.into_any(),
        )?;
        set(
            pyo3::intern!(py, "body"),
            PyBytes::new(py, &m.body).into_any(),
        )?;
        set(
            pyo3::intern!(py, "message_id"),
            m.message_id.into_pyobject(py)?.into_any(),
        )?;
        set(
            pyo3::intern!(py, "_receipt_handle"),
            m.receipt_handle.into_pyobject(py)?.into_any(),
        )?;
        set(
            pyo3::intern!(py, "tag"),
            m.tag.into_pyobject(py)?.into_any(),
        )?;
        set(pyo3::intern!(py, "keys"), keys.into_any())?;
        set(pyo3::intern!(py, "properties"), properties)?;
        set(
            pyo3::intern!(py, "message_group"),
            m.message_group.into_pyobject(py)?.into_any(),
        )?;
        set(
            pyo3::intern!(py, "delivery_attempt"),
            m.delivery_attempt.into_pyobject(py)?.into_any(),
        )?;
        set(
            pyo3::intern!(py, "born_timestamp"),
            m.born_timestamp.into_pyobject(py)?.into_any(),
        )?;
        set(
            pyo3::intern!(py, "store_timestamp"),
            m.store_timestamp.into_pyobject(py)?.into_any(),
        )?;
        set(
            pyo3::intern!(py, "delivery_timestamp"),
            m.delivery_timestamp.into_pyobject(py)?.into_any(),
        )?;
        set(
            pyo3::intern!(py, "born_host"),
            m.born_host.into_pyobject(py)?.into_any(),
        )?;
        set(
            pyo3::intern!(py, "queue_id"),
            m.queue_id.into_pyobject(py)?.into_any(),
        )?;
        set(
            pyo3::intern!(py, "queue_offset"),
            m.queue_offset.into_pyobject(py)?.into_any(),
        )?;
        set(pyo3::intern!(py, "message_type"), message_type)?;
        set(
            pyo3::intern!(py, "priority"),
            m.priority.into_pyobject(py)?.into_any(),
        )?;
        set(
            pyo3::intern!(py, "trace_context"),
            m.trace_context.into_pyobject(py)?.into_any(),
        )?;
        set(pyo3::intern!(py, "_endpoint"), endpoint.bind(py).clone())?;
        set(pyo3::intern!(py, "_settler"), py.None().into_bound(py))?;
        if cls.hasattr(pyo3::intern!(py, "lite_topic"))? {
            set(
                pyo3::intern!(py, "lite_topic"),
                m.lite_topic.into_pyobject(py)?.into_any(),
            )?;
        }
        Ok(obj)
    }
}

// -- decoding a received message ---------------------------------------------------------------------------

fn seconds(ts: &Option<prost_types::Timestamp>) -> Option<f64> {
    ts.as_ref().map(|t| t.seconds as f64 + t.nanos as f64 / 1e9)
}

fn hex_upper(digest: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut s = String::with_capacity(digest.len() * 2);
    for b in digest {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 15) as usize] as char);
    }
    s
}

/// `thrust._codec.digest.verify_digest`: hex case ignored; a CRC32 may carry leading zeros; a type this
/// client does not know cannot be vouched for.
fn digest_ok(kind: i32, body: &[u8], checksum: &str) -> bool {
    use md5::Digest as _;
    match kind {
        1 => {
            if checksum.is_empty() || !checksum.bytes().all(|b| b.is_ascii_hexdigit()) {
                return false;
            }
            let trimmed = checksum.trim_start_matches('0');
            if trimmed.len() > 8 {
                return false;
            }
            let value = if trimmed.is_empty() {
                Ok(0)
            } else {
                u32::from_str_radix(trimmed, 16)
            };
            value == Ok(crc32fast::hash(body))
        }
        2 => {
            checksum.is_ascii() && hex_upper(&md5::Md5::digest(body)).eq_ignore_ascii_case(checksum)
        }
        3 => {
            checksum.is_ascii()
                && hex_upper(&sha1::Sha1::digest(body)).eq_ignore_ascii_case(checksum)
        }
        _ => false,
    }
}

/// `thrust._codec.digest.gzip_decode`: a zlib stream (what the Java client writes) or gzip members, at most
/// `max` bytes out, nothing after the stream.
fn gzip_decode(data: &[u8], max: u64) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    if data.starts_with(&[0x1f, 0x8b]) {
        let mut decoder = flate2::read::MultiGzDecoder::new(data).take(max + 1);
        decoder
            .read_to_end(&mut out)
            .map_err(|e| format!("corrupt compressed body: {e}"))?;
    } else {
        let mut decoder = flate2::read::ZlibDecoder::new(data);
        (&mut decoder)
            .take(max + 1)
            .read_to_end(&mut out)
            .map_err(|e| format!("corrupt compressed body: {e}"))?;
        if out.len() as u64 <= max && (decoder.total_in() as usize) < data.len() {
            return Err("corrupt compressed body: trailing data after the zlib stream".into());
        }
    }
    if out.len() as u64 > max {
        return Err(format!("decompressed body exceeds {max} bytes"));
    }
    Ok(out)
}

fn decode_message(m: pb::Message) -> Decoded {
    let sp = m.system_properties.unwrap_or_default();
    let topic = m.topic.map(|t| t.name).unwrap_or_default();
    let mut body = m.body;
    let mut corrupt = None;
    if let Some(digest) = &sp.body_digest {
        if digest.r#type != 0 && !digest_ok(digest.r#type, &body, &digest.checksum) {
            corrupt = Some("body digest mismatch".to_string());
        }
    }
    if corrupt.is_none() && sp.body_encoding == pb::Encoding::Gzip as i32 {
        match gzip_decode(&body, MAX_DECOMPRESSED_SIZE) {
            Ok(plain) => body = Bytes::from(plain),
            Err(e) => corrupt = Some(format!("gzip: {e}")),
        }
    }
    let mut properties: Vec<(String, String)> = m.user_properties.into_iter().collect();
    properties.sort_unstable();
    Decoded {
        topic,
        body,
        message_id: sp.message_id,
        receipt_handle: sp.receipt_handle.unwrap_or_default(),
        tag: sp.tag,
        keys: sp.keys,
        properties,
        message_group: sp.message_group,
        delivery_attempt: sp.delivery_attempt.unwrap_or(1),
        born_timestamp: seconds(&sp.born_timestamp),
        store_timestamp: seconds(&sp.store_timestamp),
        delivery_timestamp: seconds(&sp.delivery_timestamp),
        born_host: sp.born_host,
        queue_id: sp.queue_id,
        queue_offset: sp.queue_offset,
        message_type: sp.message_type,
        priority: sp.priority,
        trace_context: sp.trace_context,
        lite_topic: sp.lite_topic,
        corrupt,
    }
}

// -- codecs --------------------------------------------------------------------------------------------------

/// Requests go out as the bytes Python serialized; `D` says how a response is read.
struct WireCodec<D>(std::marker::PhantomData<D>);

impl<D> Default for WireCodec<D> {
    fn default() -> Self {
        WireCodec(std::marker::PhantomData)
    }
}

struct RawEncoder;

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

struct RawDecoder;

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        let n = src.remaining();
        Ok(Some(src.copy_to_bytes(n)))
    }
}

struct ReceiveDecoder;

impl Decoder for ReceiveDecoder {
    type Item = pb::ReceiveMessageResponse;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Status> {
        pb::ReceiveMessageResponse::decode(src)
            .map(Some)
            .map_err(|e| Status::internal(format!("undecodable ReceiveMessageResponse: {e}")))
    }
}

impl Codec for WireCodec<Bytes> {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl Codec for WireCodec<pb::ReceiveMessageResponse> {
    type Encode = Bytes;
    type Decode = pb::ReceiveMessageResponse;
    type Encoder = RawEncoder;
    type Decoder = ReceiveDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> ReceiveDecoder {
        ReceiveDecoder
    }
}

// -- request bodies ---------------------------------------------------------------------------------------

/// The channel, with every request body wrapped in `EndsWithLast`.
#[derive(Clone)]
struct EndsEarly(tonic::transport::Channel);

impl tower_service::Service<http::Request<tonic::body::Body>> for EndsEarly {
    type Response = http::Response<tonic::body::Body>;
    type Error = tonic::transport::Error;
    type Future = tonic::transport::channel::ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower_service::Service::poll_ready(&mut self.0, cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        self.0
            .call(request.map(|body| tonic::body::Body::new(EndsWithLast::new(body))))
    }
}

/// A request body that looks one frame ahead, so that it says it has ended together with its last DATA
/// frame. tonic's request body learns that its message stream ended only when polled again, so hyper sent
/// every unary call as HEADERS, DATA and an empty DATA frame with END_STREAM: a third frame per call that
/// the server reads and handles on its own (gRPC core and grpc-java end the stream on the message's DATA
/// frame; counted with a relay that parses the frames, docs/architecture.md "The native transport").
struct EndsWithLast {
    inner: tonic::body::Body,
    /// What the look-ahead found: the next frame, or the error the body ended with.
    next: Option<Result<http_body::Frame<Bytes>, Status>>,
    ended: bool,
}

impl EndsWithLast {
    fn new(inner: tonic::body::Body) -> Self {
        EndsWithLast {
            inner,
            next: None,
            ended: false,
        }
    }
}

impl http_body::Body for EndsWithLast {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Status>>> {
        let this = &mut *self;
        let frame = match this.next.take() {
            Some(found) => found,
            None if this.ended => return Poll::Ready(None),
            None => match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(found) => found,
                None => {
                    this.ended = true;
                    return Poll::Ready(None);
                }
            },
        };
        if frame.is_ok() && !this.ended {
            // Look ahead. Pending leaves the waker registered: the caller is woken for what comes next.
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(None) => this.ended = true,
                Poll::Ready(Some(found)) => this.next = Some(found),
                Poll::Pending => {}
            }
        }
        Poll::Ready(Some(frame))
    }

    fn is_end_stream(&self) -> bool {
        self.next.is_none() && (self.ended || self.inner.is_end_stream())
    }
}

// -- connecting ----------------------------------------------------------------------------------------------

/// Connects to the endpoint's addresses in order, the first that answers (gRPC's pick_first); a `dns:`
/// endpoint is resolved at each connection. Attempts are paced per channel (`ConnectPace`).
#[derive(Clone)]
struct Connector {
    addresses: Arc<Vec<(String, u16)>>,
    resolve: bool,
    pace: Arc<Mutex<ConnectPace>>,
}

/// One channel's connection attempts. After a failed attempt the next one waits out a capped exponential
/// backoff (`backoff`: 50 ms doubling to 1 s, the pace of a call's own retries), and a connection asked
/// for meanwhile fails at once with the last attempt's error, without touching the network, as a gRPC
/// core channel in TRANSIENT_FAILURE fails calls. tonic's `Reconnect` connects again for every call after
/// a failed attempt, so without this each waiting call made attempts of its own: a producer with 128
/// sends waiting on a server that is down opened about 128 connections per round of retries.
#[derive(Default)]
struct ConnectPace {
    /// Connection attempts made (`Channel.connects_attempted`).
    attempts: u64,
    /// Consecutive failed attempts; 0 after a connection is made.
    failures: u32,
    not_before: Option<Instant>,
    last_error: Option<(std::io::ErrorKind, String)>,
}

impl ConnectPace {
    /// Ok (and counted) when an attempt may start now, else the error the asking call gets.
    fn begin(&mut self) -> std::io::Result<()> {
        if let (Some(not_before), Some((kind, text))) = (self.not_before, &self.last_error) {
            let now = Instant::now();
            if now < not_before {
                return Err(std::io::Error::new(
                    *kind,
                    format!(
                        "{text} (not connecting again for {} ms after {} failed attempts)",
                        (not_before - now).as_millis(),
                        self.failures
                    ),
                ));
            }
        }
        self.attempts += 1;
        Ok(())
    }

    fn ended(&mut self, outcome: Result<(), &std::io::Error>) {
        match outcome {
            Ok(()) => {
                self.failures = 0;
                self.not_before = None;
                self.last_error = None;
            }
            Err(e) => {
                self.not_before = Some(Instant::now() + backoff(self.failures));
                self.failures = self.failures.saturating_add(1);
                self.last_error = Some((e.kind(), e.to_string()));
            }
        }
    }
}

impl tower_service::Service<Uri> for Connector {
    type Response = hyper_util::rt::TokioIo<Coalesced>;
    type Error = std::io::Error;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: Uri) -> Self::Future {
        let pace = self.pace.clone();
        let began = pace.lock().unwrap_or_else(|e| e.into_inner()).begin();
        let connect = Self::connect(self.addresses.clone(), self.resolve);
        Box::pin(async move {
            began?;
            let result = connect.await;
            pace.lock()
                .unwrap_or_else(|e| e.into_inner())
                .ended(result.as_ref().map(|_| ()));
            result
        })
    }
}

impl Connector {
    async fn connect(
        addresses: Arc<Vec<(String, u16)>>,
        resolve: bool,
    ) -> std::io::Result<hyper_util::rt::TokioIo<Coalesced>> {
        let mut last =
            std::io::Error::new(std::io::ErrorKind::NotFound, "no address to connect to");
        for (host, port) in addresses.iter() {
            let targets: Vec<SocketAddr> = if resolve {
                match tokio::net::lookup_host((host.as_str(), *port)).await {
                    Ok(found) => found.collect(),
                    Err(e) => {
                        last = e;
                        continue;
                    }
                }
            } else {
                match (host.as_str(), *port).to_socket_addrs() {
                    Ok(found) => found.collect(),
                    Err(e) => {
                        last = e;
                        continue;
                    }
                }
            };
            for target in targets {
                match tokio::net::TcpStream::connect(target).await {
                    Ok(stream) => {
                        let _ = stream.set_nodelay(true);
                        return Ok(hyper_util::rt::TokioIo::new(Coalesced::new(stream)));
                    }
                    Err(e) => last = e,
                }
            }
        }
        Err(last)
    }
}

/// The connection's socket, with writes coalesced: what HTTP/2 writes is kept until it flushes, and a
/// flush first lets the other ready tasks run once. A unary call's HEADERS and DATA frames come from two
/// tasks (hyper sends the body from a task of its own), and calls of one burst come one task each: each
/// flushed alone, a unary call cost about two socket writes (strace of a producer at 128 in flight), and
/// every write on loopback also runs the receiver's TCP work on this thread. After the one yield, the
/// frames queued meanwhile go out in one write.
struct Coalesced {
    inner: tokio::net::TcpStream,
    buf: Vec<u8>,
    written: usize,
    yielded: bool,
}

/// Above this much pending output a write goes to the socket without waiting for a flush.
const COALESCE_LIMIT: usize = 256 * 1024;

impl Coalesced {
    fn new(inner: tokio::net::TcpStream) -> Self {
        Coalesced {
            inner,
            buf: Vec::with_capacity(16 * 1024),
            written: 0,
            yielded: false,
        }
    }

    /// Ready(Ok) once more output may be kept: at once below `COALESCE_LIMIT`, else when what is
    /// pending is in the socket (every write, plain or vectored, passes here first).
    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.buf.len() - self.written < COALESCE_LIMIT {
            return Poll::Ready(Ok(()));
        }
        self.poll_out(cx)
    }

    /// Write out what is pending; Ready(Ok) once all of it is in the socket.
    fn poll_out(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        use tokio::io::AsyncWrite;
        while self.written < self.buf.len() {
            match Pin::new(&mut self.inner).poll_write(cx, &self.buf[self.written..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()))
                }
                Poll::Ready(Ok(n)) => self.written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        self.buf.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncRead for Coalesced {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Coalesced {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        std::task::ready!(self.poll_room(cx))?;
        self.buf.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        std::task::ready!(self.poll_room(cx))?;
        let mut n = 0;
        for b in bufs {
            self.buf.extend_from_slice(b);
            n += b.len();
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.written == self.buf.len() {
            return Pin::new(&mut self.inner).poll_flush(cx);
        }
        if !self.yielded {
            // Once per batch: the tasks that are ready now (a call's body, the next calls) add their
            // frames first. Woken at once, so this delays the write by one turn of the scheduler.
            self.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        match self.poll_out(cx) {
            Poll::Ready(Ok(())) => {
                self.yielded = false;
                Pin::new(&mut self.inner).poll_flush(cx)
            }
            other => other,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.poll_out(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut self.inner).poll_shutdown(cx),
            other => other,
        }
    }
}

fn is_connect_error(status: &Status) -> bool {
    has_source::<tonic::ConnectError>(status)
}

/// The code reported for a status of `code`; `transport`: tonic made it from a transport error (it has a
/// source), `remote_reset`: that error is a stream reset the server sent, `timed_out`: tonic's deadline
/// ended the call (`Failure::from_status`).
fn reported_code(code: Code, transport: bool, remote_reset: bool, timed_out: bool) -> Code {
    match code {
        _ if timed_out => Code::DeadlineExceeded,
        Code::Unknown if transport => Code::Unavailable,
        Code::Cancelled if transport && !remote_reset => Code::Unavailable,
        code => code,
    }
}

/// The causes of `status`, outermost first (a transport error's chain: tonic, hyper, h2, io).
fn sources(status: &Status) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
    std::iter::successors(std::error::Error::source(status), |err| err.source())
}

/// Whether an error of type `E` is among the causes of `status`.
fn has_source<E: std::error::Error + 'static>(status: &Status) -> bool {
    sources(status).any(|err| err.is::<E>())
}

/// Whether the HTTP/2 error under `status` is a stream reset the peer sent (not a closed connection).
fn is_remote_reset(status: &Status) -> bool {
    sources(status)
        .find_map(|err| err.downcast_ref::<h2::Error>())
        .is_some_and(|h2| h2.is_reset() && h2.is_remote())
}

/// The status message with the causes a transport error carries ("transport error" alone says nothing).
fn describe(status: &Status) -> String {
    let mut text = status.message().to_string();
    for err in sources(status) {
        let part = err.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
    }
    text
}

// -- TLS ---------------------------------------------------------------------------------------------------

/// Verifies the server's certificate against the roots of `ca_file` (WebPKI), and also accepts a server
/// that presents one of those very certificates: a self-signed certificate made with `openssl req -x509`
/// carries `CA:TRUE`, which WebPKI refuses as an end entity (`CaUsedAsEndEntity`) while OpenSSL and
/// BoringSSL, so grpcio and the Java client, accept it when it is itself trusted. A pinned certificate is
/// trusted as it is, byte for byte.
#[derive(Debug)]
struct PinnedOrWebPki {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
    pinned: Vec<Vec<u8>>,
}

fn pinned_or_webpki(pem: &[u8]) -> PyResult<Arc<dyn rustls::client::danger::ServerCertVerifier>> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let mut pinned = Vec::new();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(pem) {
        let cert =
            cert.map_err(|e| PyValueError::new_err(format!("unreadable CA certificate: {e}")))?;
        pinned.push(cert.as_ref().to_vec());
        roots
            .add(cert)
            .map_err(|e| PyValueError::new_err(format!("unusable CA certificate: {e}")))?;
    }
    // ring, the provider tonic's `tls-ring` feature builds its own TLS with.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let inner =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| PyValueError::new_err(format!("unusable CA certificates: {e}")))?;
    Ok(Arc::new(PinnedOrWebPki { inner, pinned }))
}

impl rustls::client::danger::ServerCertVerifier for PinnedOrWebPki {
    fn verify_server_cert(
        &self,
        end_entity: &rustls_pki_types::CertificateDer<'_>,
        intermediates: &[rustls_pki_types::CertificateDer<'_>],
        server_name: &rustls_pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::Other(_)))
                if self
                    .pinned
                    .iter()
                    .any(|p| p.as_slice() == end_entity.as_ref()) =>
            {
                Ok(rustls::client::danger::ServerCertVerified::assertion())
            }
            outcome => outcome,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

// -- the channel -------------------------------------------------------------------------------------------

const STATE_IDLE: u8 = 0;
const STATE_READY: u8 = 1;
const STATE_FAILING: u8 = 2;

struct ChannelShared {
    channel: tonic::transport::Channel,
    hub: Arc<HubShared>,
    calls: Mutex<HashMap<u64, AbortHandle>>,
    closed: AtomicBool,
    state: AtomicU8,
    started: AtomicU64,
    /// Receives told not to poll again after an empty answer (`Channel.stop_repeating`).
    no_repeat: Mutex<HashSet<u64>>,
    /// Empty long polls that a receive renewed on its own (`Channel.receives_repeated`).
    repeated: AtomicU64,
    pace: Arc<Mutex<ConnectPace>>,
}

impl ChannelShared {
    fn grpc(&self) -> tonic::client::Grpc<EndsEarly> {
        tonic::client::Grpc::new(EndsEarly(self.channel.clone()))
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX)
    }

    fn reached(&self, outcome: &Result<(), &Status>) {
        let state = match outcome {
            Ok(()) => STATE_READY,
            Err(status) if is_connect_error(status) => STATE_FAILING,
            Err(status) if status.code() == Code::Unavailable => STATE_FAILING,
            Err(_) => STATE_READY,
        };
        self.state.store(state, Ordering::Release);
    }

    fn finished(&self, token: u64) {
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&token);
    }

    /// Whether receive `token` may poll again after an empty answer (and forget that it was asked).
    fn may_repeat(&self, token: u64) -> bool {
        !self.closed.load(Ordering::Acquire)
            && !self
                .no_repeat
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&token)
    }

    fn forget_repeat(&self, token: u64) {
        self.no_repeat
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&token);
    }
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis((50u64 << attempt.min(5)).min(1000))
}

fn metadata_map(pairs: Vec<(String, String)>) -> PyResult<MetadataMap> {
    let mut md = MetadataMap::with_capacity(pairs.len());
    for (k, v) in pairs {
        let key = MetadataKey::from_bytes(k.as_bytes())
            .map_err(|_| PyValueError::new_err(format!("invalid metadata key {k:?}")))?;
        let value = MetadataValue::try_from(v.as_str())
            .map_err(|_| PyValueError::new_err(format!("invalid metadata value for {k:?}")))?;
        md.insert(key, value);
    }
    Ok(md)
}

fn path_of(rpc: &str) -> PyResult<PathAndQuery> {
    PathAndQuery::from_str(&format!("{SERVICE}{rpc}"))
        .map_err(|_| PyValueError::new_err(format!("invalid rpc {rpc:?}")))
}

/// Whether to try again a call that failed connecting: while the budget lasts, after a short pause.
async fn pause_before_retry(started: Instant, budget: Duration, attempt: u32) -> bool {
    let pause = backoff(attempt);
    if started.elapsed() + pause > budget {
        return false;
    }
    tokio::time::sleep(pause).await;
    true
}

/// One ReceiveMessage request shortened after waiting for the connection
/// (`thrust._core.settings.receive_after_connect`): the deadline is what is left, and the long poll keeps
/// the slack the deadline had beyond it, never below the proxy's minimum.
fn shortened_receive(request: &Bytes, timeout: f64, waited: f64) -> Option<Bytes> {
    let mut parsed = pb::ReceiveMessageRequest::decode(request.clone()).ok()?;
    let poll = parsed
        .long_polling_timeout
        .as_ref()
        .map(|d| d.seconds as f64 + d.nanos as f64 / 1e9)?;
    let remaining = timeout - waited;
    let slack = timeout - poll.max(MIN_POLLING_SECONDS);
    let poll = MIN_POLLING_SECONDS.max(poll.min(remaining - slack));
    parsed.long_polling_timeout = Some(pb_duration(poll));
    Some(Bytes::from(parsed.encode_to_vec()))
}

/// `secs` seconds as a protobuf Duration.
fn pb_duration(secs: f64) -> prost_types::Duration {
    let nanos = (secs * 1e9).round() as i64;
    prost_types::Duration {
        seconds: nanos / 1_000_000_000,
        nanos: (nanos % 1_000_000_000) as i32,
    }
}

/// `poll` shortened (lengthened, when it would fall below the proxy's minimum) so that a long poll begun
/// now ends on a multiple of `grid` seconds of the wall clock, as `thrust._core.settings.poll_on_grid`
/// (which says why); `poll` itself when `grid` is not positive.
fn poll_on_grid(poll: f64, grid: f64) -> f64 {
    if grid <= 0.0 {
        return poll;
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let aligned = ((now + poll) / grid).floor() * grid - now;
    if aligned >= MIN_POLLING_SECONDS {
        aligned
    } else {
        aligned + grid
    }
}

/// One HTTP/2 connection to one endpoint, and the calls on it.
#[pyclass(frozen, module = "thrust_native")]
struct Channel {
    shared: Arc<ChannelShared>,
    runtime: Arc<Runtime>,
    pid: u32,
}

#[pymethods]
impl Channel {
    /// `addresses` are (host, port) pairs tried in order; `resolve` for a `dns:` endpoint. `tls` is None
    /// for plaintext, else (root PEM or None for the system roots, client key PEM, client chain PEM,
    /// server name override).
    #[new]
    #[pyo3(signature = (hub, addresses, resolve, tls, keepalive_interval, keepalive_timeout))]
    fn new(
        hub: &Hub,
        addresses: Vec<(String, u16)>,
        resolve: bool,
        tls: Option<(
            Option<Vec<u8>>,
            Option<Vec<u8>>,
            Option<Vec<u8>>,
            Option<String>,
        )>,
        keepalive_interval: f64,
        keepalive_timeout: f64,
    ) -> PyResult<Self> {
        check_same_process(hub.shared.pid, "client")?;
        let (host, port) = addresses
            .first()
            .cloned()
            .ok_or_else(|| PyValueError::new_err("no address"))?;
        let authority = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{authority}"))
            .map_err(|e| PyValueError::new_err(format!("invalid endpoint {authority}: {e}")))?
            .http2_keep_alive_interval(Duration::from_secs_f64(keepalive_interval.max(0.1)))
            .keep_alive_timeout(Duration::from_secs_f64(keepalive_timeout.max(0.1)))
            .keep_alive_while_idle(true)
            .connect_timeout(Duration::from_secs(3))
            // HTTP/2's default 64 KiB windows stall a consumer's several receives of 32 x 1 KiB in flight.
            .initial_stream_window_size(4 * 1024 * 1024)
            .initial_connection_window_size(16 * 1024 * 1024);
        if let Some((root, key, chain, server_name)) = tls {
            let mut config = ClientTlsConfig::new();
            if root.is_none() {
                config = config.with_native_roots();
            }
            if let (Some(key), Some(chain)) = (key, chain) {
                config = config.identity(Identity::from_pem(chain, key));
            }
            let name = server_name.unwrap_or_else(|| host.clone());
            if let Ok(origin) = Uri::from_str(&format!("https://{name}:{port}")) {
                endpoint = endpoint.origin(origin);
            }
            config = config.domain_name(name);
            endpoint = match root {
                Some(pem) => endpoint.tls_config_with_verifier(config, pinned_or_webpki(&pem)?),
                None => endpoint.tls_config(config),
            }
            .map_err(|e| PyValueError::new_err(format!("TLS configuration refused: {e}")))?;
        }
        let runtime = hub.runtime.clone();
        let pace = Arc::new(Mutex::new(ConnectPace::default()));
        let connector = Connector {
            addresses: Arc::new(addresses),
            resolve,
            pace: pace.clone(),
        };
        let channel = {
            let _guard = runtime.enter();
            endpoint.connect_with_connector_lazy(connector)
        };
        Ok(Channel {
            shared: Arc::new(ChannelShared {
                channel,
                hub: hub.shared.clone(),
                calls: Mutex::new(HashMap::new()),
                closed: AtomicBool::new(false),
                state: AtomicU8::new(STATE_IDLE),
                started: AtomicU64::new(0),
                no_repeat: Mutex::new(HashSet::new()),
                repeated: AtomicU64::new(0),
                pace,
            }),
            runtime,
            pid: process_id(),
        })
    }

    /// 0 idle (nothing reached the server yet), 1 ready (the last call reached it), 2 failing (the last
    /// call could not connect or the connection broke).
    fn state(&self) -> u8 {
        self.shared.state.load(Ordering::Acquire)
    }

    /// How many calls this channel started (diagnostics and tests).
    fn calls_started(&self) -> u64 {
        self.shared.started.load(Ordering::Relaxed)
    }

    /// How many connections this channel tried to make (`ConnectPace`; diagnostics and tests).
    fn connects_attempted(&self) -> u64 {
        self.shared
            .pace
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .attempts
    }

    /// How many empty long polls receives renewed on their own (`receive(..., repeat_for)`): ReceiveMessage
    /// calls that `calls_started` does not count.
    fn receives_repeated(&self) -> u64 {
        self.shared.repeated.load(Ordering::Relaxed)
    }

    /// Receive `token` polls no more after its current poll (a push consumer's queue was dropped).
    fn stop_repeating(&self, token: u64) {
        if self
            .shared
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&token)
        {
            self.shared
                .no_repeat
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(token);
        }
    }

    /// Start unary calls, each `(token, rpc, request, metadata, timeout, connect_budget)`: what the event
    /// loop started during one of its iterations. Each completes through the hub under its `token`; it
    /// first waits up to `connect_budget` seconds for a connection, and the whole takes at most `timeout`
    /// seconds. Handing them over together lets the tokio worker find them all when it wakes, so that
    /// the connection writes their frames together, instead of waking (and writing) once per call. A
    /// call whose rpc or metadata is invalid fails alone, through the hub (INVALID_ARGUMENT), as every
    /// call's outcome does.
    #[allow(clippy::type_complexity)]
    fn unary_many(
        &self,
        calls: Vec<(u64, String, Vec<u8>, Vec<(String, String)>, f64, f64)>,
    ) -> PyResult<()> {
        self.check_open()?;
        let mut running = self.shared.calls.lock().unwrap_or_else(|e| e.into_inner());
        for (token, rpc, request, metadata, timeout, budget) in calls {
            match path_of(&rpc).and_then(|path| Ok((path, metadata_map(metadata)?))) {
                Ok((path, md)) => self.start_unary(
                    &mut running,
                    token,
                    path,
                    md,
                    Bytes::from(request),
                    timeout,
                    budget,
                ),
                Err(e) => self.shared.hub.push(Done::Unary {
                    token,
                    result: Err(Failure {
                        code: Code::InvalidArgument as i32,
                        message: e.to_string(),
                        connect: false,
                    }),
                }),
            }
        }
        Ok(())
    }

    /// Raise what `unary_many` would raise for a channel that cannot take calls (closed, or made in the
    /// parent of this forked process); nothing otherwise.
    fn ensure_open(&self) -> PyResult<()> {
        self.check_open()
    }

    /// Start one ReceiveMessage; it completes (through the hub) when the stream ends, with every message
    /// it brought decoded, and the failure if it broke. With `first_early`, the first message after the OK
    /// status is handed over at once (kind 6), and the rest with the completion. With `repeat_for` > 0
    /// (seconds; infinity: until `stop_repeating`), an empty answer is polled again for that long without
    /// a completion, and the `Polls` returned counts those renewals. With `repeat_poll` > 0 a renewed poll
    /// asks for that long polling, shortened to end on `grid` (`poll_on_grid`) when `grid` > 0.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (token, request, metadata, timeout, connect_budget, endpoint, first_early, repeat_for=0.0, repeat_poll=0.0, grid=0.0))]
    #[allow(clippy::too_many_arguments)]
    fn receive(
        &self,
        py: Python<'_>,
        token: u64,
        request: &[u8],
        metadata: Vec<(String, String)>,
        timeout: f64,
        connect_budget: f64,
        endpoint: Py<PyAny>,
        first_early: bool,
        repeat_for: f64,
        repeat_poll: f64,
        grid: f64,
    ) -> PyResult<Option<Polls>> {
        self.check_open()?;
        let _ = py;
        let endpoint = Arc::new(endpoint);
        let path = path_of("ReceiveMessage")?;
        let mut md = metadata_map(metadata)?;
        let request_id = md
            .get(REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let original = Bytes::copy_from_slice(request);
        let shared = self.shared.clone();
        let total = timeout.max(0.0);
        let budget = Duration::from_secs_f64(connect_budget.max(0.0));
        // A window too long for a Duration (infinity) renews until stopped.
        let repeat_for = Duration::try_from_secs_f64(repeat_for.max(0.0)).unwrap_or(Duration::MAX);
        let renewed = Arc::new(AtomicU64::new(0));
        let counter = renewed.clone();
        // The request a renewed poll sends, when it asks for a long polling of its own.
        let mut renewing = if repeat_for.is_zero() || repeat_poll <= 0.0 {
            None
        } else {
            pb::ReceiveMessageRequest::decode(original.clone()).ok()
        };
        self.spawn(token, async move {
            let began = Instant::now();
            let mut polls: u64 = 0;
            let mut current = original;
            loop {
                let mut first_early = first_early;
                let mut arrived = false;
                let started = Instant::now();
                let deadline = started + Duration::from_secs_f64(total);
                let mut attempt = 0;
                let mut request = current.clone();
                let mut code = -1;
                let mut text = String::new();
                let mut delivery = None;
                let mut messages = Vec::new();
                let failure = 'call: loop {
                    let mut grpc = shared.grpc();
                    let mut req =
                        tonic::Request::from_parts(md.clone(), Default::default(), request.clone());
                    req.set_timeout(deadline.saturating_duration_since(Instant::now()));
                    let open = async {
                        grpc.ready()
                            .await
                            .map_err(|e| Status::unavailable(e.to_string()))?;
                        grpc.server_streaming(
                            req,
                            path.clone(),
                            WireCodec::<pb::ReceiveMessageResponse>::default(),
                        )
                        .await
                    };
                    let mut stream = match tokio::time::timeout_at(deadline, open).await {
                        Err(_) => break Some(Failure::deadline()),
                        Ok(Err(status)) => {
                            shared.reached(&Err(&status));
                            if is_connect_error(&status)
                                && pause_before_retry(started, budget, attempt).await
                            {
                                attempt += 1;
                                let waited = started.elapsed().as_secs_f64();
                                if let Some(shorter) = shortened_receive(&current, total, waited) {
                                    request = shorter;
                                }
                                continue;
                            }
                            break Some(Failure::from_status(&status));
                        }
                        Ok(Ok(response)) => {
                            shared.reached(&Ok(()));
                            response.into_inner()
                        }
                    };
                    loop {
                        match tokio::time::timeout_at(deadline, stream.message()).await {
                            Err(_) => break 'call Some(Failure::deadline()),
                            Ok(Ok(Some(item))) => match item.content {
                                Some(pb::receive_message_response::Content::Status(status)) => {
                                    code = status.code;
                                    text = status.message;
                                }
                                Some(pb::receive_message_response::Content::Message(message)) => {
                                    let decoded = decode_message(message);
                                    arrived = true;
                                    if first_early && code == pb::Code::Ok as i32 {
                                        first_early = false;
                                        let endpoint = endpoint.clone();
                                        shared.hub.push(Done::ReceiveFirst {
                                            token,
                                            message: decoded,
                                            endpoint,
                                        });
                                    } else {
                                        messages.push(decoded);
                                    }
                                }
                                Some(pb::receive_message_response::Content::DeliveryTimestamp(
                                    ts,
                                )) => {
                                    delivery = seconds(&Some(ts));
                                }
                                None => {}
                            },
                            Ok(Ok(None)) => break 'call None,
                            Ok(Err(status)) => {
                                shared.reached(&Err(&status));
                                break 'call Some(Failure::from_status(&status));
                            }
                        }
                    }
                };
                // An empty long poll of a receive asked to repeat (a push consumer's idle queue) is renewed
                // here, with the same request and attempt id, without waking the event loop: the loop learns
                // only of messages, failures and the end of the `repeat_for` window (which the caller keeps
                // shorter than the time after which it deems a queue without activity expired).
                if failure.is_none()
                    && !arrived
                    && code == pb::Code::MessageNotFound as i32
                    && began.elapsed() < repeat_for
                    && shared.may_repeat(token)
                {
                    polls += 1;
                    counter.store(polls, Ordering::Relaxed);
                    shared.repeated.fetch_add(1, Ordering::Relaxed);
                    if let Some(id) = &request_id {
                        // Each call its own request id, as every other call has (the proxy logs them).
                        if let Ok(value) = MetadataValue::try_from(format!("{id}.{polls}")) {
                            md.insert(REQUEST_ID, value);
                        }
                    }
                    if let Some(next) = renewing.as_mut() {
                        next.long_polling_timeout =
                            Some(pb_duration(poll_on_grid(repeat_poll, grid)));
                        current = Bytes::from(next.encode_to_vec());
                    }
                    continue;
                }
                shared.forget_repeat(token);
                shared.finished(token);
                shared.hub.push(Done::Receive {
                    token,
                    code,
                    text,
                    delivery,
                    messages,
                    failure,
                    endpoint,
                });
                break;
            }
        });
        Ok((!repeat_for.is_zero()).then_some(Polls(renewed)))
    }

    /// Open the Telemetry stream; commands come through the hub under `token` (kind 3), its end as kind 4.
    fn telemetry(&self, token: u64, metadata: Vec<(String, String)>) -> PyResult<TelemetryWriter> {
        self.check_open()?;
        let path = path_of("Telemetry")?;
        let md = metadata_map(metadata)?;
        let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
        let shared = self.shared.clone();
        self.spawn(token, async move {
            let mut grpc = shared.grpc();
            let req = tonic::Request::from_parts(
                md,
                Default::default(),
                tokio_stream::wrappers::UnboundedReceiverStream::new(rx),
            );
            let outcome = async {
                grpc.ready()
                    .await
                    .map_err(|e| Status::unavailable(e.to_string()))?;
                let mut stream = grpc
                    .streaming(req, path, WireCodec::<Bytes>::default())
                    .await?
                    .into_inner();
                shared.reached(&Ok(()));
                while let Some(data) = stream.message().await? {
                    shared.hub.push(Done::TelemetryItem { token, data });
                }
                Ok::<(), Status>(())
            }
            .await;
            let failure = match outcome {
                Ok(()) => None,
                Err(status) => {
                    shared.reached(&Err(&status));
                    Some(Failure::from_status(&status))
                }
            };
            shared.finished(token);
            shared.hub.push(Done::TelemetryEnd { token, failure });
        });
        Ok(TelemetryWriter {
            sender: Mutex::new(Some(tx)),
        })
    }

    /// Cancel the call of `token` (its stream is reset; no completion comes for it).
    fn cancel(&self, token: u64) {
        if let Some(handle) = self
            .shared
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&token)
        {
            handle.abort();
        }
    }

    /// Refuse new calls and cancel those in flight after `grace` seconds (at once for None); idempotent.
    #[pyo3(signature = (grace=None))]
    fn close(&self, grace: Option<f64>) {
        if self.shared.closed.swap(true, Ordering::AcqRel) || self.pid != process_id() {
            return;
        }
        let shared = self.shared.clone();
        let abort_all = move || {
            let calls =
                std::mem::take(&mut *shared.calls.lock().unwrap_or_else(|e| e.into_inner()));
            for (token, handle) in calls {
                handle.abort();
                shared.hub.push(Done::Cancelled { token });
            }
        };
        match grace {
            Some(g) if g > 0.0 => {
                self.runtime.spawn(async move {
                    tokio::time::sleep(Duration::from_secs_f64(g)).await;
                    abort_all();
                });
            }
            _ => abort_all(),
        }
    }
}

impl Channel {
    /// Start one unary call of `unary_many`, with `calls` (the channel's running calls) locked.
    #[allow(clippy::too_many_arguments)]
    fn start_unary(
        &self,
        calls: &mut HashMap<u64, AbortHandle>,
        token: u64,
        path: PathAndQuery,
        md: MetadataMap,
        request: Bytes,
        timeout: f64,
        connect_budget: f64,
    ) {
        let shared = self.shared.clone();
        let timeout = Duration::from_secs_f64(timeout.max(0.0));
        let budget = Duration::from_secs_f64(connect_budget.max(0.0));
        self.spawn_locked(calls, token, async move {
            let started = Instant::now();
            let deadline = started + timeout;
            let mut attempt = 0;
            let result = loop {
                let mut grpc = shared.grpc();
                let mut req =
                    tonic::Request::from_parts(md.clone(), Default::default(), request.clone());
                req.set_timeout(deadline.saturating_duration_since(Instant::now()));
                let call = async {
                    grpc.ready()
                        .await
                        .map_err(|e| Status::unavailable(e.to_string()))?;
                    grpc.unary(req, path.clone(), WireCodec::<Bytes>::default())
                        .await
                };
                match tokio::time::timeout_at(deadline, call).await {
                    Err(_) => break Err(Failure::deadline()),
                    Ok(Ok(response)) => {
                        shared.reached(&Ok(()));
                        break Ok(response.into_inner());
                    }
                    Ok(Err(status)) => {
                        shared.reached(&Err(&status));
                        if is_connect_error(&status)
                            && pause_before_retry(started, budget, attempt).await
                        {
                            attempt += 1;
                            continue;
                        }
                        break Err(Failure::from_status(&status));
                    }
                }
            };
            shared.finished(token);
            shared.hub.push(Done::Unary { token, result });
        });
    }

    fn check_open(&self) -> PyResult<()> {
        check_same_process(self.pid, "client")?;
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(PyRuntimeError::new_err("the channel is closed"));
        }
        Ok(())
    }

    fn spawn<F>(&self, token: u64, work: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let mut calls = self.shared.calls.lock().unwrap_or_else(|e| e.into_inner());
        self.spawn_locked(&mut calls, token, work);
    }

    /// `spawn` with `calls` (the channel's running calls) already locked, so that the entry goes in
    /// before the task can finish and remove it.
    fn spawn_locked<F>(&self, calls: &mut HashMap<u64, AbortHandle>, token: u64, work: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.shared.started.fetch_add(1, Ordering::Relaxed);
        let handle = self.runtime.spawn(work);
        calls.insert(token, handle.abort_handle());
    }
}

/// How many empty long polls a renewing receive (`Channel.receive(..., repeat_for)`) has renewed so far:
/// the activity of an idle queue whose polls never reach the event loop. Its owner reads it when it
/// checks whether the queue expired (`thrust._io.rpc.Renewal.renewed`).
#[pyclass(frozen, module = "thrust_native")]
struct Polls(Arc<AtomicU64>);

#[pymethods]
impl Polls {
    /// The empty long polls renewed so far.
    fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The request side of a Telemetry stream.
#[pyclass(frozen, module = "thrust_native")]
struct TelemetryWriter {
    sender: Mutex<Option<mpsc::UnboundedSender<Bytes>>>,
}

#[pymethods]
impl TelemetryWriter {
    /// Queue one serialized TelemetryCommand; False once the stream has ended.
    fn write(&self, data: &[u8]) -> bool {
        match self
            .sender
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            Some(tx) => tx.send(Bytes::copy_from_slice(data)).is_ok(),
            None => false,
        }
    }

    /// Half-close the request side.
    fn close(&self) {
        self.sender.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// Decode one serialized `Message` as a receive would (tests compare it with the Python codec).
#[pyfunction]
fn decode_for_test<'py>(
    py: Python<'py>,
    hub: &Hub,
    message: &[u8],
    endpoint: Py<PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let parsed = pb::Message::decode(message).map_err(|e| PyValueError::new_err(e.to_string()))?;
    hub.build(py, decode_message(parsed), &endpoint)
}

/// `reported_code` for the test of its table (`tests/unit/test_native.py`): the gRPC code reported for a
/// status of gRPC code `code`.
#[pyfunction]
fn reported_code_for_test(code: i32, transport: bool, remote_reset: bool, timed_out: bool) -> i32 {
    reported_code(Code::from_i32(code), transport, remote_reset, timed_out) as i32
}

/// Push `per_thread` empty Telemetry items from each of `threads` new threads, as fast as they can, for
/// the test that no wake-up is lost while the loop drains (`tests/unit/test_native.py`).
#[pyfunction]
fn push_for_test(hub: &Hub, threads: usize, per_thread: u64) {
    for t in 0..threads {
        let shared = hub.shared.clone();
        std::thread::spawn(move || {
            for i in 0..per_thread {
                shared.push(Done::TelemetryItem {
                    token: t as u64 * per_thread + i,
                    data: Bytes::new(),
                });
            }
        });
    }
}

#[pymodule]
fn thrust_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Hub>()?;
    m.add_class::<Channel>()?;
    m.add_class::<TelemetryWriter>()?;
    m.add_class::<Polls>()?;
    m.add_function(wrap_pyfunction!(decode_for_test, m)?)?;
    m.add_function(wrap_pyfunction!(push_for_test, m)?)?;
    m.add_function(wrap_pyfunction!(reported_code_for_test, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
