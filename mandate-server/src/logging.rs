//! The process's log: every line (tracing's, and the few the binary says itself) goes to
//! stderr from a thread of its own, through a bounded queue, so that logging never blocks
//! or fails a request or the shutdown. A line that cannot be queued (stderr is slower than
//! the lines come) or written (a full disk, a closed pipe) is counted, not retried:
//! [`lost_lines`].
//!
//! tracing-subscriber's own writer would `eprintln!` a failed write, which panics when
//! stderr fails: a handler's 500 then lost its answer, and the task that starts the
//! graceful shutdown died before starting it.

use std::io::{self, IsTerminal, Write};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::time::Duration;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// Lines waiting for the writing thread at most; more are lost (and counted).
const QUEUE_LINES: usize = 4096;

/// Lines that could not be written.
static LOST: AtomicU64 = AtomicU64::new(0);
/// Lines queued and not yet written (or found unwritable).
static PENDING: AtomicU64 = AtomicU64::new(0);
static QUEUE: OnceLock<Queue> = OnceLock::new();

enum Message {
    Line(Vec<u8>),
    /// Answered once every line queued before it has been handled.
    Flush(mpsc::Sender<()>),
}

/// The sending end of the log queue; tracing's writer.
#[derive(Clone)]
pub struct Queue(SyncSender<Message>);

impl Queue {
    /// A queue whose lines a new thread writes to `sink`.
    fn start(sink: impl Write + Send + 'static) -> io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel(QUEUE_LINES);
        std::thread::Builder::new()
            .name("log-writer".into())
            .spawn(move || write_lines(rx, sink))?;
        Ok(Self(tx))
    }

    fn send(&self, line: Vec<u8>) {
        PENDING.fetch_add(1, Ordering::Relaxed);
        match self.0.try_send(Message::Line(line)) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                PENDING.fetch_sub(1, Ordering::Relaxed);
                LOST.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Lines waiting in the writer thread, written to the sink in one call.
struct Batch {
    bytes: Vec<u8>,
    lines: u64,
}

impl Batch {
    /// Writes what is buffered; a failed write loses (and counts) every line in it.
    fn write_to(&mut self, sink: &mut impl Write) {
        if self.lines == 0 {
            return;
        }
        if sink
            .write_all(&self.bytes)
            .and_then(|()| sink.flush())
            .is_err()
        {
            LOST.fetch_add(self.lines, Ordering::Relaxed);
        }
        PENDING.fetch_sub(self.lines, Ordering::Relaxed);
        self.bytes.clear();
        self.lines = 0;
    }
}

/// The most bytes buffered before they are written, however many lines keep coming.
const BATCH_BYTES: usize = 64 * 1024;

/// The writer thread: takes every line already queued into one buffer and writes it when
/// the queue is empty (or the buffer full), so a busy server makes one write call per
/// batch of lines rather than one per line.
fn write_lines(rx: Receiver<Message>, mut sink: impl Write) {
    let mut batch = Batch {
        bytes: Vec::with_capacity(BATCH_BYTES),
        lines: 0,
    };
    loop {
        let message = if batch.lines == 0 {
            match rx.recv() {
                Ok(message) => message,
                Err(_) => break,
            }
        } else {
            match rx.try_recv() {
                Ok(message) => message,
                Err(TryRecvError::Empty) => {
                    batch.write_to(&mut sink);
                    continue;
                }
                Err(TryRecvError::Disconnected) => break,
            }
        };
        match message {
            Message::Line(line) => {
                batch.bytes.extend_from_slice(&line);
                batch.lines += 1;
                if batch.bytes.len() >= BATCH_BYTES {
                    batch.write_to(&mut sink);
                }
            }
            Message::Flush(done) => {
                batch.write_to(&mut sink);
                let _ = done.send(());
            }
        }
    }
    batch.write_to(&mut sink);
}

impl Write for &Queue {
    /// Queues `buf` (tracing hands over one whole line at a time); never fails.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send(buf.to_vec());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Queue {
    type Writer = &'a Queue;

    fn make_writer(&'a self) -> Self::Writer {
        self
    }
}

/// How log lines are written: `text` for people, `json` (one object a line) for machines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// tracing-subscriber's plain text lines.
    #[default]
    Text,
    /// One JSON object a line: `timestamp`, `level`, `target` and the event's `fields`.
    Json,
}

/// The format chosen at [`init`]; [`say`] follows it.
static FORMAT: OnceLock<Format> = OnceLock::new();

/// The filter: `MANDATE_LOG` if set, else `RUST_LOG`, else [`DEFAULT_FILTER`]; whatever it
/// says, the database drivers log nothing below info
/// ([`crate::storage::DRIVER_LOG_CAPS`]).
fn filter() -> EnvFilter {
    let chosen = ["MANDATE_LOG", "RUST_LOG"]
        .iter()
        .find_map(|name| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .and_then(|v| EnvFilter::try_new(v).ok())
        })
        .unwrap_or_else(|| EnvFilter::new(DEFAULT_FILTER));
    // Added after the operator's filter, so that they win.
    crate::storage::DRIVER_LOG_CAPS
        .iter()
        .filter_map(|d| d.parse().ok())
        .fold(chosen, EnvFilter::add_directive)
}

/// The filter when neither variable is set: `info`, without the per-request lines, whose
/// formatting and writes cost the hot path throughput (docs/performance.md, "Request lines
/// and metrics on the hot path"); `MANDATE_LOG=info` turns them on.
pub const DEFAULT_FILTER: &str = "info,mandate::request=off";

/// Sends tracing's lines to stderr through the queue in `format`, at the level of
/// `MANDATE_LOG` or `RUST_LOG` (`info` by default). Without a thread for the queue,
/// logging goes nowhere.
pub fn init(format: Format) {
    let Ok(queue) = Queue::start(io::stderr()) else {
        return;
    };
    let queue = QUEUE.get_or_init(|| queue).clone();
    let format = *FORMAT.get_or_init(|| format);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(queue)
        .with_ansi(io::stderr().is_terminal())
        .log_internal_errors(false);
    let _ = match format {
        Format::Text => builder.try_init(),
        Format::Json => builder.json().try_init(),
    };
}

/// Logs `text` as a line of its own, as the binary says it: in text, the bare line (no
/// level, no timestamp); in JSON, an `info` event of target `mandate`, so that every line
/// of a JSON log is JSON.
pub fn say(text: &str) {
    if FORMAT.get() == Some(&Format::Json) {
        tracing::info!(target: "mandate", "{text}");
        return;
    }
    if let Some(queue) = QUEUE.get() {
        let mut line = text.as_bytes().to_vec();
        line.push(b'\n');
        queue.send(line);
    }
}

/// Waits up to `limit` for the lines queued so far to be written (or found unwritable).
pub fn flush(limit: Duration) {
    if let Some(queue) = QUEUE.get() {
        let (done, wait) = mpsc::channel();
        if queue.0.try_send(Message::Flush(done)).is_ok() {
            let _ = wait.recv_timeout(limit);
        }
    }
}

/// Log lines lost so far: not written, or still waiting to be.
pub fn lost_lines() -> u64 {
    LOST.load(Ordering::Relaxed) + PENDING.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A sink that fails every write, as /dev/full does.
    struct Full;

    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::other("no space left on device"))
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_a_sink_refuses_are_counted_and_the_writer_never_fails() {
        let before = LOST.load(Ordering::Relaxed);
        let queue = Queue::start(Full).unwrap();
        for _ in 0..3 {
            assert_eq!((&queue).write(b"a line\n").unwrap(), 7);
        }
        let (done, wait) = mpsc::channel();
        queue.0.send(Message::Flush(done)).unwrap();
        wait.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(LOST.load(Ordering::Relaxed) >= before + 3);
    }

    /// A sink that holds its first write until told to go on, and records every write.
    struct Gated {
        gate: Option<mpsc::Receiver<()>>,
        writes: std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
    }

    impl Write for Gated {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if let Some(gate) = self.gate.take() {
                let _ = gate.recv_timeout(Duration::from_secs(5));
            }
            self.writes.lock().unwrap().push(buf.to_vec());
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Lines queued while the sink is busy go out together in one write, in order, none lost.
    #[test]
    fn lines_queued_meanwhile_are_written_in_one_call() {
        let (open, gate) = mpsc::channel();
        let writes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let queue = Queue::start(Gated {
            gate: Some(gate),
            writes: writes.clone(),
        })
        .unwrap();
        (&queue).write_all(b"first\n").unwrap();
        // Whether the writer thread takes these with the first line or is held in its
        // write meanwhile, they are written together.
        for n in 0..100 {
            (&queue)
                .write_all(format!("line {n}\n").as_bytes())
                .unwrap();
        }
        open.send(()).unwrap();
        let (done, wait) = mpsc::channel();
        queue.0.send(Message::Flush(done)).unwrap();
        wait.recv_timeout(Duration::from_secs(5)).unwrap();
        let writes = writes.lock().unwrap();
        let text: String = writes.iter().map(|w| String::from_utf8_lossy(w)).collect();
        let expected: String = std::iter::once("first\n".to_owned())
            .chain((0..100).map(|n| format!("line {n}\n")))
            .collect();
        assert_eq!(text, expected);
        assert!(writes.len() <= 3, "{} writes for 101 lines", writes.len());
    }
}
