//! The C2SP signed-note envelope (c2sp.org/signed-note), parsed strictly and written
//! exactly.
//!
//! A note is a text ending in a newline, a blank line, then one or more signature lines
//! `— <key name> <base64(key id || signature)>`, each ending in a newline. The whole note is
//! UTF-8 with no ASCII control character but the newline; a key name is non-empty and holds
//! no Unicode space and no `+`; the text is separated from the signatures by the last blank
//! line. This module reads and writes the envelope; which signatures count is decided by
//! the verifier ([`crate::tlog::LogKeys`]), which ignores signatures of keys it does not
//! know, as the specification requires.
//!
//! Stricter than the specification in two ways, both of which a note written by a
//! conforming signer passes: a note holds at most [`MAX_SIGNATURES`] signatures (the
//! specification asks verifiers for a limit of at least 16; Go's `sumdb/note` uses 100),
//! and one key (name and key id) signs at most once: a second line of the same key is
//! refused, not silently dropped.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// The most signature lines a note may have.
pub(crate) const MAX_SIGNATURES: usize = 100;

/// What starts each signature line: an em dash (U+2014) and a space.
const SIGNATURE_PREFIX: &str = "\u{2014} ";

/// Why a note was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NoteError {
    /// The note holds an ASCII control character other than the newline (a carriage
    /// return, a tab, a NUL).
    #[error("a signed note holds control character U+{0:04X}: only newlines may appear")]
    ControlCharacter(u32),
    /// No blank line separates the text from signatures, or nothing follows it.
    #[error("a signed note needs its text, a blank line, then at least one signature line")]
    NoSignatures,
    /// The last signature line does not end in a newline.
    #[error("a signed note must end with a newline")]
    MissingFinalNewline,
    /// A line after the blank line is not `— <key name> <base64>`.
    #[error("signature line {line} is not \"\u{2014} <key name> <base64 signature>\"")]
    BadSignatureLine {
        /// Which signature line, from 1.
        line: usize,
    },
    /// A key name is empty, holds a Unicode space or a `+`.
    #[error("key name {0:?} must be non-empty, without spaces or '+'")]
    BadKeyName(String),
    /// A signature is not standard base64 of a key id and at least one byte.
    #[error("the signature of key {0:?} is not standard base64 of a 4-byte key id and a signature")]
    BadSignature(String),
    /// One key (name and key id) signs twice.
    #[error("key {name:?} (id {key_id:08x}) signs the note twice")]
    DuplicateSignature {
        /// The key's name.
        name: String,
        /// The key's id.
        key_id: u32,
    },
    /// More than 100 signature lines.
    #[error("a signed note may hold at most {MAX_SIGNATURES} signatures")]
    TooManySignatures,
    /// The text to sign does not end in a newline or is empty.
    #[error("a note's text must be non-empty and end with a newline")]
    BadText,
}

/// One signature line of a note.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NoteSignature {
    name: String,
    key_id: u32,
    signature: Vec<u8>,
}

impl NoteSignature {
    /// A signature by the key `name` with id `key_id`; refused when the name is not a valid
    /// key name or the signature is empty.
    pub fn new(
        name: impl Into<String>,
        key_id: u32,
        signature: Vec<u8>,
    ) -> Result<Self, NoteError> {
        let name = name.into();
        if !is_valid_key_name(&name) {
            return Err(NoteError::BadKeyName(name));
        }
        if signature.is_empty() {
            return Err(NoteError::BadSignature(name));
        }
        Ok(Self {
            name,
            key_id,
            signature,
        })
    }

    /// The key's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key's id: the first four bytes of the line's base64, big-endian.
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// The signature's bytes, after the key id.
    pub fn signature(&self) -> &[u8] {
        &self.signature
    }

    fn parse(line: &str, number: usize) -> Result<Self, NoteError> {
        let rest = line
            .strip_prefix(SIGNATURE_PREFIX)
            .ok_or(NoteError::BadSignatureLine { line: number })?;
        let (name, encoded) = rest
            .split_once(' ')
            .ok_or(NoteError::BadSignatureLine { line: number })?;
        if !is_valid_key_name(name) {
            return Err(NoteError::BadKeyName(name.to_owned()));
        }
        let bytes = STANDARD
            .decode(encoded)
            .map_err(|_| NoteError::BadSignature(name.to_owned()))?;
        let (id, signature) = bytes
            .split_first_chunk::<4>()
            .filter(|(_, signature)| !signature.is_empty())
            .ok_or_else(|| NoteError::BadSignature(name.to_owned()))?;
        Ok(Self {
            name: name.to_owned(),
            key_id: u32::from_be_bytes(*id),
            signature: signature.to_vec(),
        })
    }
}

impl fmt::Display for NoteSignature {
    /// The signature line without its newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut bytes = Vec::with_capacity(4 + self.signature.len());
        bytes.extend_from_slice(&self.key_id.to_be_bytes());
        bytes.extend_from_slice(&self.signature);
        write!(
            f,
            "{SIGNATURE_PREFIX}{} {}",
            self.name,
            STANDARD.encode(bytes)
        )
    }
}

/// Whether `name` may name a key: non-empty, no Unicode space, no `+`.
pub(crate) fn is_valid_key_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(|c: char| c.is_whitespace() || c == '+')
}

/// A signed note: its text and its signatures, in order.
///
/// [`SignedNote::parse`] reads one strictly; its [`Display`](fmt::Display) writes it back
/// byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SignedNote {
    text: String,
    signatures: Vec<NoteSignature>,
}

impl SignedNote {
    /// A note of `text` (non-empty, ending in a newline) and its signatures.
    pub fn new(text: impl Into<String>, signatures: Vec<NoteSignature>) -> Result<Self, NoteError> {
        let text = text.into();
        if !text.ends_with('\n') {
            return Err(NoteError::BadText);
        }
        if let Some(c) = control_character(&text) {
            return Err(NoteError::ControlCharacter(c));
        }
        check_signatures(&signatures)?;
        Ok(Self { text, signatures })
    }

    /// Reads a note (see the module doc for what is refused).
    pub fn parse(note: &str) -> Result<Self, NoteError> {
        if let Some(c) = control_character(note) {
            return Err(NoteError::ControlCharacter(c));
        }
        let split = note.rfind("\n\n").ok_or(NoteError::NoSignatures)?;
        let (text, lines) = (&note[..=split], &note[split + 2..]);
        if lines.is_empty() {
            return Err(NoteError::NoSignatures);
        }
        let lines = lines
            .strip_suffix('\n')
            .ok_or(NoteError::MissingFinalNewline)?;
        let mut signatures = Vec::new();
        for (number, line) in lines.split('\n').enumerate() {
            if signatures.len() == MAX_SIGNATURES {
                return Err(NoteError::TooManySignatures);
            }
            signatures.push(NoteSignature::parse(line, number + 1)?);
        }
        check_signatures(&signatures)?;
        Ok(Self {
            text: text.to_owned(),
            signatures,
        })
    }

    /// The signed text, with its final newline.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The signatures, in the note's order.
    pub fn signatures(&self) -> &[NoteSignature] {
        &self.signatures
    }
}

impl fmt::Display for SignedNote {
    /// The note exactly: text, blank line, one line per signature.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.text)?;
        for signature in &self.signatures {
            writeln!(f, "{signature}")?;
        }
        Ok(())
    }
}

/// The first ASCII control character other than the newline.
fn control_character(text: &str) -> Option<u32> {
    text.chars()
        .find(|&c| c != '\n' && (c as u32) < 0x20)
        .map(u32::from)
}

fn check_signatures(signatures: &[NoteSignature]) -> Result<(), NoteError> {
    if signatures.is_empty() {
        return Err(NoteError::NoSignatures);
    }
    if signatures.len() > MAX_SIGNATURES {
        return Err(NoteError::TooManySignatures);
    }
    for (i, signature) in signatures.iter().enumerate() {
        let twice = signatures[..i]
            .iter()
            .any(|s| s.name == signature.name && s.key_id == signature.key_id);
        if twice {
            return Err(NoteError::DuplicateSignature {
                name: signature.name.clone(),
                key_id: signature.key_id,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    /// The example of c2sp.org/signed-note, "Ognuno sta solo sul cuor della terra".
    const POEM: &str = "Ognuno sta solo sul cuor della terra\ntrafitto da un raggio di sole:\n\ned è subito sera.\n\n— quasimodo.example/salvatore NnugSzTjtVAewIS+Z/iJhUPeFDkO/5QQ2i5ddnGITLlC+EhfLW9oJKONrMouFSQU0xMcXxj99ihAQwaqP3ZekRwNtIc=\n";

    /// `count` signature lines of distinct keys.
    fn signatures(count: usize) -> String {
        (0..count).map(|i| format!("— k{i} AAAAAAE=\n")).collect()
    }

    #[test]
    fn the_specifications_example_reads_and_writes_back_byte_for_byte() {
        let note = SignedNote::parse(POEM).unwrap();
        // The text may hold blank lines: the last one separates the signatures.
        assert_eq!(
            note.text(),
            "Ognuno sta solo sul cuor della terra\ntrafitto da un raggio di sole:\n\ned è subito sera.\n"
        );
        assert_eq!(note.signatures().len(), 1);
        assert_eq!(note.signatures()[0].name(), "quasimodo.example/salvatore");
        assert_eq!(note.signatures()[0].key_id(), 0x367b_a04b);
        assert_eq!(note.signatures()[0].signature().len(), 64);
        assert_eq!(note.to_string(), POEM);
    }

    #[test]
    fn hostile_envelopes_are_refused_by_name() {
        let line = "— a.example/k AAAAAAE=\n";
        let cases: Vec<(String, NoteError)> = vec![
            ("text\n".to_owned(), NoteError::NoSignatures),
            ("text\n\n".to_owned(), NoteError::NoSignatures),
            (
                format!("text\n\n{}", line.trim_end()),
                NoteError::MissingFinalNewline,
            ),
            // A blank line after the signatures makes them the text, and leaves none.
            (format!("text\n\n{line}\n"), NoteError::NoSignatures),
            (
                format!("text\n\n{line}extra\n"),
                NoteError::BadSignatureLine { line: 2 },
            ),
            (
                "text\n\n- a.example/k AAAAAAE=\n".to_owned(),
                NoteError::BadSignatureLine { line: 1 },
            ),
            (
                "text\n\n—a.example/k AAAAAAE=\n".to_owned(),
                NoteError::BadSignatureLine { line: 1 },
            ),
            (
                "text\n\n— a.example/k\n".to_owned(),
                NoteError::BadSignatureLine { line: 1 },
            ),
            (
                "text\r\n\n— a AAAAAAE=\n".to_owned(),
                NoteError::ControlCharacter(0x0d),
            ),
            (
                "te\txt\n\n— a AAAAAAE=\n".to_owned(),
                NoteError::ControlCharacter(0x09),
            ),
            (
                "text\n\n— a+b AAAAAAE=\n".to_owned(),
                NoteError::BadKeyName("a+b".to_owned()),
            ),
            (
                "text\n\n—  AAAAAAE=\n".to_owned(),
                NoteError::BadKeyName(String::new()),
            ),
            (
                "text\n\n— a\u{a0}b AAAAAAE=\n".to_owned(),
                NoteError::BadKeyName("a\u{a0}b".to_owned()),
            ),
            (
                "text\n\n— a AAAAAAE= \n".to_owned(),
                NoteError::BadSignature("a".to_owned()),
            ),
            (
                "text\n\n— a AAAAAAE\n".to_owned(),
                NoteError::BadSignature("a".to_owned()),
            ),
            (
                "text\n\n— a AAAAAA==\n".to_owned(),
                NoteError::BadSignature("a".to_owned()),
            ),
            (
                "text\n\n— a AAAAAAE_\n".to_owned(),
                NoteError::BadSignature("a".to_owned()),
            ),
            (
                format!("text\n\n{line}{line}"),
                NoteError::DuplicateSignature {
                    name: "a.example/k".to_owned(),
                    key_id: 0,
                },
            ),
            (
                format!("text\n\n{}", signatures(MAX_SIGNATURES + 1)),
                NoteError::TooManySignatures,
            ),
        ];
        for (note, error) in cases {
            assert_eq!(SignedNote::parse(&note), Err(error), "{note:?}");
        }
    }

    #[test]
    fn a_name_with_spaces_has_its_spaces_taken_as_the_separator() {
        // "— a b AAAAAAE=": the name is "a", and "b AAAAAAE=" is not base64.
        assert_eq!(
            SignedNote::parse("text\n\n— a b AAAAAAE=\n"),
            Err(NoteError::BadSignature("a".to_owned()))
        );
    }

    #[test]
    fn one_key_with_two_ids_or_two_keys_with_one_id_may_both_sign() {
        let note = "text\n\n— a AAAAAAE=\n— a AAAAAQE=\n— b AAAAAAE=\n";
        let parsed = SignedNote::parse(note).unwrap();
        assert_eq!(parsed.signatures().len(), 3);
        assert_eq!(parsed.to_string(), note);
        assert!(SignedNote::parse(&format!("text\n\n{}", signatures(MAX_SIGNATURES))).is_ok());
    }

    #[test]
    fn notes_are_built_only_from_valid_parts() {
        let signature = NoteSignature::new("a.example/k", 7, vec![1, 2]).unwrap();
        assert_eq!(signature.to_string(), "— a.example/k AAAABwEC");
        let note = SignedNote::new("body\n", vec![signature.clone()]).unwrap();
        assert_eq!(note.to_string(), "body\n\n— a.example/k AAAABwEC\n");
        assert_eq!(SignedNote::parse(&note.to_string()).unwrap(), note);
        assert_eq!(
            SignedNote::new("body", vec![signature.clone()]),
            Err(NoteError::BadText)
        );
        assert_eq!(
            SignedNote::new("body\n", vec![]),
            Err(NoteError::NoSignatures)
        );
        assert_eq!(
            NoteSignature::new("a b", 1, vec![1]),
            Err(NoteError::BadKeyName("a b".to_owned()))
        );
        assert_eq!(
            NoteSignature::new("a", 1, vec![]),
            Err(NoteError::BadSignature("a".to_owned()))
        );
    }
}
