//! The witness's HTTP side: two routes on the listener `mandate mcp --http` uses (bounded
//! connections, header-read timeout, keep-alive as the specification recommends).
//!
//! The checks, the cosignature and the state file's write run on a blocking thread: the
//! write syncs to disk, which must not stall the runtime's few threads.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::add::{Answer, Witness};
use crate::error::CliError;
use crate::listener::{self, Bounds};

/// The largest request body: 63 proof lines and a checkpoint with its signatures fit many
/// times over.
const MAX_BODY: usize = 64 * 1024;

/// Time a request's head, then its body, may take to arrive.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Open connections at most.
const MAX_CONNECTIONS: usize = 256;

/// Serves `witness` on `addr` until the process is stopped; prints the bound address.
pub async fn serve(witness: Witness, addr: SocketAddr) -> Result<(), CliError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::usage(format!("cannot listen on {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| CliError::usage(format!("cannot read the bound address: {e}")))?;
    eprintln!("mandate witness: cosigning as {}", witness.verifier_key());
    // The one line on stdout, for scripts and tests that started it on port 0.
    crate::output::line(&format!("listening on http://{bound}"))?;
    let bounds = Bounds {
        max_connections: MAX_CONNECTIONS,
        read_timeout: READ_TIMEOUT,
    };
    listener::serve(listener, router(Arc::new(witness)), bounds).await;
    Ok(())
}

/// `POST /add-checkpoint` and `GET /{origin hash}/checkpoint`.
fn router(witness: Arc<Witness>) -> Router {
    Router::new()
        .route("/add-checkpoint", post(add_checkpoint))
        .route("/{origin_hash}/checkpoint", get(checkpoint))
        .with_state(witness)
}

async fn add_checkpoint(State(witness): State<Arc<Witness>>, request: Request) -> Response {
    let read = tokio::time::timeout(
        READ_TIMEOUT,
        axum::body::to_bytes(request.into_body(), MAX_BODY),
    );
    let body: Bytes = match read.await {
        Ok(Ok(body)) => body,
        Ok(Err(_)) => {
            return respond(Answer {
                status: 413,
                content_type: "text/plain; charset=utf-8",
                body: format!("the request body is over {MAX_BODY} bytes, or was cut off\n"),
            });
        }
        Err(_) => {
            return respond(Answer {
                status: 408,
                content_type: "text/plain; charset=utf-8",
                body: "the request body did not arrive in time\n".into(),
            });
        }
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let answer = tokio::task::spawn_blocking(move || witness.add_checkpoint(&body, now)).await;
    match answer {
        Ok(answer) => respond(answer),
        Err(_) => respond(Answer {
            status: 500,
            content_type: "text/plain; charset=utf-8",
            body: "the witness failed on this request: try again later\n".into(),
        }),
    }
}

async fn checkpoint(State(witness): State<Arc<Witness>>, Path(hash): Path<String>) -> Response {
    match witness.checkpoint_of(&hash) {
        Some(note) => respond(Answer {
            status: 200,
            content_type: "text/plain; charset=utf-8",
            body: note,
        }),
        None => respond(Answer {
            status: 404,
            content_type: "text/plain; charset=utf-8",
            body: "this witness has cosigned no checkpoint of a log with that origin hash\n".into(),
        }),
    }
}

fn respond(answer: Answer) -> Response {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(header::CONTENT_TYPE, answer.content_type)],
        Body::from(answer.body),
    )
        .into_response()
}
