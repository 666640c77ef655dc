//! The C2SP `tlog-checkpoint` body (c2sp.org/tlog-checkpoint): origin, tree size, root.
//!
//! ```text
//! verdicts.example.com/log/org_4Fq2/live
//! 20852163
//! CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=
//! ```
//!
//! Three non-empty lines, each ending in a newline: the origin (which log), the tree size
//! in decimal without leading zeros, the root as standard base64; then optional extension
//! lines, each non-empty. This is the text of a signed note; the note's signatures are
//! checked by [`crate::tlog::LogKeys::verify`].

use std::fmt;

use super::hash::LogHash;
use super::note::NoteError;
use crate::jws::SignError;

/// Why a checkpoint was refused: its text, its note or its signatures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The signed-note envelope is malformed.
    #[error("checkpoint note: {0}")]
    Note(#[from] NoteError),
    /// Fewer than three lines, an empty line, or no final newline.
    #[error(
        "a checkpoint is an origin line, a size line and a root line, each non-empty and ending in a newline"
    )]
    Lines,
    /// The origin holds a character a line cannot (a control character).
    #[error("the checkpoint origin {0:?} holds a control character")]
    BadOrigin(String),
    /// The size line is not a decimal number without leading zeros that fits 64 bits.
    #[error("the checkpoint size {0:?} is not a decimal number without leading zeros")]
    BadSize(String),
    /// The root line is not 32 bytes of standard base64.
    #[error("the checkpoint root {0:?} is not 32 bytes of standard base64 with padding")]
    BadRoot(String),
    /// No signature is by a key given, under the checkpoint's origin as key name.
    #[error("no signature of the checkpoint of {origin:?} is by a log key of the key set")]
    NoKnownSignature {
        /// The checkpoint's origin.
        origin: String,
    },
    /// A signature by a key given does not verify: the note is not what the key signed.
    #[error("the signature of log key {kid:?} under the name {name:?} does not verify")]
    BadSignature {
        /// The key's `kid` in the JWK Set.
        kid: String,
        /// The key name of the signature line (a checkpoint's origin).
        name: String,
    },
    /// The log key could not sign.
    #[error("signing the checkpoint failed: {0}")]
    Sign(#[from] SignError),
    /// The checkpoint's origin is not a valid note key name, so it cannot sign itself.
    #[error("the origin {0:?} cannot be a key name (it is empty or holds a space or '+')")]
    OriginNotKeyName(String),
}

/// A checkpoint's text: which log, how many leaves, and their root.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Checkpoint {
    origin: String,
    size: u64,
    root: LogHash,
    extensions: Vec<String>,
}

impl Checkpoint {
    /// The checkpoint of the log `origin` at `size` leaves with root `root`; refused when
    /// the origin is empty or holds a control character (a newline among them).
    pub(crate) fn new(
        origin: impl Into<String>,
        size: u64,
        root: LogHash,
    ) -> Result<Self, CheckpointError> {
        let origin = origin.into();
        if origin.is_empty() || has_control(&origin) {
            return Err(CheckpointError::BadOrigin(origin));
        }
        Ok(Self {
            origin,
            size,
            root,
            extensions: Vec::new(),
        })
    }

    /// Adds an extension line (non-empty, no control character). The specification calls
    /// them opaque and not recommended: this crate writes none, and reads and keeps them.
    pub(crate) fn with_extension(
        mut self,
        line: impl Into<String>,
    ) -> Result<Self, CheckpointError> {
        let line = line.into();
        if line.is_empty() || has_control(&line) {
            return Err(CheckpointError::Lines);
        }
        self.extensions.push(line);
        Ok(self)
    }

    /// Reads a checkpoint's text (a note's text, with its final newline), strictly.
    pub fn parse(text: &str) -> Result<Self, CheckpointError> {
        let body = text.strip_suffix('\n').ok_or(CheckpointError::Lines)?;
        let lines: Vec<&str> = body.split('\n').collect();
        let [origin, size, root, extensions @ ..] = lines.as_slice() else {
            return Err(CheckpointError::Lines);
        };
        if lines.iter().any(|line| line.is_empty()) {
            return Err(CheckpointError::Lines);
        }
        let mut checkpoint = Self::new(*origin, parse_size(size)?, parse_root(root)?)?;
        for line in extensions {
            checkpoint = checkpoint.with_extension(*line)?;
        }
        Ok(checkpoint)
    }

    /// Which log: a unique name, by our convention also the log key's name in the note.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// How many leaves the tree holds.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The tree's root.
    pub(crate) fn root(&self) -> &LogHash {
        &self.root
    }

    /// The extension lines, in order.
    pub fn extensions(&self) -> &[String] {
        &self.extensions
    }
}

impl fmt::Display for Checkpoint {
    /// The text exactly, with its final newline: what is signed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.origin)?;
        writeln!(f, "{}", self.size)?;
        writeln!(f, "{}", self.root)?;
        for line in &self.extensions {
            writeln!(f, "{line}")?;
        }
        Ok(())
    }
}

fn has_control(text: &str) -> bool {
    text.chars().any(|c| (c as u32) < 0x20)
}

fn parse_size(text: &str) -> Result<u64, CheckpointError> {
    let canonical =
        text == "0" || (!text.starts_with('0') && text.bytes().all(|b| b.is_ascii_digit()));
    text.parse::<u64>()
        .ok()
        .filter(|_| canonical)
        .ok_or_else(|| CheckpointError::BadSize(text.chars().take(32).collect()))
}

fn parse_root(text: &str) -> Result<LogHash, CheckpointError> {
    LogHash::from_base64(text)
        .ok_or_else(|| CheckpointError::BadRoot(text.chars().take(64).collect()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    const ROOT: &str = "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=";

    #[test]
    fn the_specifications_example_reads_and_writes_back() {
        let text = format!("example.com/behind-the-sofa\n20852163\n{ROOT}\n");
        let checkpoint = Checkpoint::parse(&text).unwrap();
        assert_eq!(checkpoint.origin(), "example.com/behind-the-sofa");
        assert_eq!(checkpoint.size(), 20_852_163);
        assert_eq!(checkpoint.root().to_base64(), ROOT);
        assert!(checkpoint.extensions().is_empty());
        assert_eq!(checkpoint.to_string(), text);
    }

    #[test]
    fn extension_lines_are_kept_and_written_back() {
        // Rekor's checkpoints carry a timestamp line.
        let text = format!(
            "rekor.sigstore.dev - 2605736670972794746\n6915767\n{ROOT}\nTimestamp: 1673599771028600100\n"
        );
        let checkpoint = Checkpoint::parse(&text).unwrap();
        assert_eq!(
            checkpoint.origin(),
            "rekor.sigstore.dev - 2605736670972794746"
        );
        assert_eq!(checkpoint.extensions(), ["Timestamp: 1673599771028600100"]);
        assert_eq!(checkpoint.to_string(), text);
    }

    #[test]
    fn hostile_texts_are_refused_by_name() {
        let cases = [
            (format!("o\n1\n{ROOT}"), CheckpointError::Lines),
            ("o\n1\n".to_owned(), CheckpointError::Lines),
            (format!("\n1\n{ROOT}\n"), CheckpointError::Lines),
            (format!("o\n1\n{ROOT}\n\n"), CheckpointError::Lines),
            (format!("o\n1\n{ROOT}\n\next\n"), CheckpointError::Lines),
            (
                format!("o\n01\n{ROOT}\n"),
                CheckpointError::BadSize("01".into()),
            ),
            (
                format!("o\n00\n{ROOT}\n"),
                CheckpointError::BadSize("00".into()),
            ),
            (
                format!("o\n+1\n{ROOT}\n"),
                CheckpointError::BadSize("+1".into()),
            ),
            (
                format!("o\n-1\n{ROOT}\n"),
                CheckpointError::BadSize("-1".into()),
            ),
            (
                format!("o\n 1\n{ROOT}\n"),
                CheckpointError::BadSize(" 1".into()),
            ),
            (
                format!("o\n18446744073709551616\n{ROOT}\n"),
                CheckpointError::BadSize("18446744073709551616".into()),
            ),
            (
                "o\n1\nAAAA\n".to_owned(),
                CheckpointError::BadRoot("AAAA".into()),
            ),
            (
                format!("o\n1\n{}\n", ROOT.replace('=', "")),
                CheckpointError::BadRoot(ROOT.replace('=', "")),
            ),
            (
                format!("o\r\n1\n{ROOT}\n"),
                CheckpointError::BadOrigin("o\r".into()),
            ),
            (format!("o\n1\n{ROOT}\next\t\n"), CheckpointError::Lines),
        ];
        for (text, error) in cases {
            assert_eq!(Checkpoint::parse(&text), Err(error), "{text:?}");
        }
        assert_eq!(
            Checkpoint::parse(&format!("o\n0\n{ROOT}\n"))
                .unwrap()
                .size(),
            0
        );
        assert_eq!(
            Checkpoint::parse(&format!("o\n18446744073709551615\n{ROOT}\n"))
                .unwrap()
                .size(),
            u64::MAX
        );
    }

    #[test]
    fn checkpoints_are_built_only_from_valid_parts() {
        let root = LogHash::empty();
        assert_eq!(
            Checkpoint::new("", 0, root),
            Err(CheckpointError::BadOrigin(String::new()))
        );
        assert_eq!(
            Checkpoint::new("a\nb", 0, root),
            Err(CheckpointError::BadOrigin("a\nb".into()))
        );
        let checkpoint = Checkpoint::new("o", 0, root).unwrap();
        assert_eq!(
            checkpoint.clone().with_extension(""),
            Err(CheckpointError::Lines)
        );
        let text = checkpoint.with_extension("x").unwrap().to_string();
        assert_eq!(text, format!("o\n0\n{root}\nx\n"));
    }
}
