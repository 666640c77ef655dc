//! `mandate mcp` over stdio, as hosts launch it: rmcp's line transport with the edges of
//! `edges.rs`. Lines read from stdin pass through a copier that lifts a `tools/call`'s
//! `task` member into its `_meta` (every other line is passed on byte for byte, so rmcp
//! reads, refuses or ignores it as it would stdin), and the session's messages pass
//! through `LegacyTasks`.

use rmcp::ServiceExt as _;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncReadExt as _, AsyncWrite};
use tokio::io::{AsyncWriteExt as _, BufReader};

use super::edges::{LegacyTasks, lift_task_line};
use super::tools::MandateTools;
use crate::error::CliError;

/// The longest line passed on, as rmcp's own transport bounds it: a longer one is dropped
/// (a peer that never sends a newline cannot make the copier grow without end).
const MAX_LINE: usize = 16 * 1024 * 1024;

/// Serves `tools` on stdin and stdout until the host closes stdin.
pub async fn serve(tools: MandateTools) -> Result<(), CliError> {
    let (to_rmcp, from_copier) = tokio::io::duplex(64 * 1024);
    let copier = tokio::spawn(copy_lifting_tasks(tokio::io::stdin(), to_rmcp));
    let transport = LegacyTasks::new(AsyncRwTransport::new_server(
        from_copier,
        tokio::io::stdout(),
    ));
    let running = tools
        .serve(transport)
        .await
        .map_err(|e| CliError::usage(format!("MCP session failed to start: {e}")))?;
    let ended = running.waiting().await;
    copier.abort();
    ended.map_err(|e| CliError::usage(format!("MCP session ended with an error: {e}")))?;
    Ok(())
}

/// Copies `input` to `output` line by line, each through [`lift_task_line`]; ends at the
/// end of `input` (closing `output`, which ends the session) or when `output` is closed.
async fn copy_lifting_tasks(input: impl AsyncRead + Unpin, mut output: impl AsyncWrite + Unpin) {
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        let limit = (MAX_LINE + 1) as u64;
        match (&mut input).take(limit).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.len() > MAX_LINE && !line.ends_with(b"\n") {
            // Oversized: the rest of the line is dropped, as rmcp drops it.
            if !skip_line(&mut input).await {
                return;
            }
            continue;
        }
        let lifted = lift_task_line(&line);
        let passed = lifted.as_deref().unwrap_or(&line);
        if output.write_all(passed).await.is_err() || output.flush().await.is_err() {
            return;
        }
    }
}

/// Reads up to the next newline, keeping nothing; false at the end of the input.
async fn skip_line(input: &mut (impl tokio::io::AsyncBufRead + Unpin)) -> bool {
    loop {
        let (consumed, done) = match input.fill_buf().await {
            Ok([]) | Err(_) => return false,
            Ok(bytes) => match bytes.iter().position(|&b| b == b'\n') {
                Some(at) => (at + 1, true),
                None => (bytes.len(), false),
            },
        };
        input.consume(consumed);
        if done {
            return true;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_pass_byte_for_byte_but_a_task_request_which_is_lifted() {
        let input: &[u8] = b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\r\n\
            not json at all\n\
            {\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"a\",\"task\":{}}}\n\
            {\"last\": \"no newline\"}";
        let mut output = Vec::new();
        copy_lifting_tasks(input, &mut output).await;
        let text = String::from_utf8(output).unwrap();
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        assert_eq!(
            lines[0],
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\r\n"
        );
        assert_eq!(lines[1], "not json at all\n");
        assert!(
            lines[2].contains("\"_meta\":{\"io.github.mandate/task\":{}}"),
            "{}",
            lines[2]
        );
        assert!(lines[2].ends_with('\n'));
        assert_eq!(lines[3], "{\"last\": \"no newline\"}");
    }
}
