//! The ceiling: a bare axum JSON echo (`POST /echo` answers the body it parsed, as JSON)
//! on its own multi-thread runtime, shaped like the server's (`#[tokio::main]`: one worker
//! per core, the accept loop on the main thread).

use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::routing::post;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::error::{Context, Result};

/// A running echo server.
pub struct Echo {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

async fn echo(Json(body): Json<Value>) -> Json<Value> {
    Json(body)
}

/// Starts the echo server with `workers` runtime threads.
pub fn start(workers: usize) -> Result<Echo> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers.max(1))
        .enable_all()
        .build()
        .ctx("echo runtime")?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").ctx("echo bind")?;
    listener.set_nonblocking(true).ctx("echo listener")?;
    let addr = listener.local_addr().ctx("echo address")?;
    let (stop, stopped) = oneshot::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
    let thread = std::thread::spawn(move || {
        runtime.block_on(async move {
            let listener = match tokio::net::TcpListener::from_std(listener) {
                Ok(l) => {
                    let _ = ready_tx.send(Ok(()));
                    l
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e.into()));
                    return;
                }
            };
            let app = Router::new().route("/echo", post(echo));
            tokio::select! {
                r = axum::serve(listener, app) => {
                    if let Err(e) = r {
                        eprintln!("echo server: {e}");
                    }
                }
                _ = stopped => {}
            }
        });
        runtime.shutdown_timeout(Duration::from_secs(1));
    });
    ready_rx
        .recv()
        .ctx("echo server thread ended before listening")??;
    Ok(Echo {
        addr,
        stop: Some(stop),
        thread: Some(thread),
    })
}

impl Echo {
    /// Stops it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.shutdown();
    }
}
