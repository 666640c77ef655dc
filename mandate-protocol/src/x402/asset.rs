//! What an x402 `asset` may be, and the decimals of the ones a service knows.
//!
//! x402 names the asset paid in by "a token contract address or an ISO 4217 currency code
//! for fiat". Mandate reads exactly these spellings, all ASCII:
//!
//! - an **ISO 4217 code** (fiat): three letters of a currency Mandate knows, in any letter
//!   case, with spaces around it or after an `iso4217:` prefix (`USD`, `usd`, `" EUR"`,
//!   `iso4217:EUR`, `ISO4217: eur`); the request's currency must then be that code, and the
//!   atomic amount is in its minor units (ISO 4217's exponent: 2 for USD, 0 for JPY);
//! - an **on-chain address** of the shapes x402's schemes use: `0x` and 1 to 64 hex digits
//!   (EVM, Aptos), a Move coin type `0x…::module::NAME` (Sui), 32 to 44 base58 characters
//!   (Solana, Tron), 56 characters of `A-Z2-7` starting with `C` or `G` (Stellar), 4 to 20
//!   digits (an Algorand asset id; three digits would read as an ISO 4217 numeric code),
//!   three dotted numbers (a Hedera token id, `0.0.456858`), `keeta_` and 20 to 100 of
//!   `a-z2-7` (Keeta);
//! - a **CAIP-19 asset id** (`eip155:8453/erc20:0x8335…`, `bip122:…/slip44:0`), any chain;
//!   one whose asset namespace is `iso4217` (`swift:0/iso4217:EUR`) is fiat.
//!
//! Any other spelling is refused: a look-alike of a code (full-width `ＥＵＲ`, a Greek
//! `Ε`, an accented `É`), an invisible or control character (`EUR\u{200b}`, `EUR\0`), a
//! space inside (`EU R`), another prefix (`iso-4217:`, `ISO 4217:`, `fiat:`), a token's
//! symbol (`USDC`: its address says which token it is). Otherwise a fiat payment could pass
//! for a token and escape the currency check.

use crate::names::Currency;

/// What an `asset` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Asset {
    /// An ISO 4217 currency, the code as Mandate writes it (upper case).
    Fiat(Currency),
    /// A token on a chain: an address or a CAIP-19 asset id.
    OnChain,
}

/// What an asset must be, said in every refusal.
const SHAPES: &str = "an x402 asset is an ISO 4217 currency code (USD, or iso4217:USD), an on-chain address (0x and hex digits, base58, Stellar, an Algorand or Hedera id, a Move coin type) or a CAIP-19 asset id (eip155:8453/erc20:0x…), in ASCII";

/// The ISO 4217 prefix x402's fiat spellings may carry, in any letter case.
const ISO_PREFIX: &str = "iso4217:";

/// Reads an `asset`: what it names, or why it is refused (a sentence naming the problem and
/// what an asset may be).
pub(crate) fn read(text: &str) -> Result<Asset, String> {
    if let Some(bad) = text.chars().find(|c| !(c.is_ascii_graphic() || *c == ' ')) {
        return Err(format!(
            "{} holds {}, which no asset spelling has: {SHAPES}",
            shown(text),
            character(bad)
        ));
    }
    if let Some(fiat) = fiat(text) {
        return fiat.map(Asset::Fiat);
    }
    if on_chain(text) {
        return Ok(Asset::OnChain);
    }
    if let Some(caip) = caip19(text) {
        return caip;
    }
    Err(format!("{} is not one: {SHAPES}", shown(text)))
}

/// `text` as an error shows it: quoted, every character outside printable ASCII written
/// as its code point.
fn shown(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
            out.push(c);
        } else {
            out.push_str(&format!("\\u{{{:04X}}}", u32::from(c)));
        }
    }
    out.push('"');
    out
}

/// A character an error names: its code point, and itself when it is a letter or digit
/// (an invisible one is only named).
fn character(c: char) -> String {
    if c.is_ascii() || !c.is_alphanumeric() {
        format!("U+{:04X}", u32::from(c))
    } else {
        format!("U+{:04X} ({c})", u32::from(c))
    }
}

/// The currency an ISO 4217 spelling names, or why it names none; `None` when `text` is
/// not spelled as a code (it may be an address).
fn fiat(text: &str) -> Option<Result<Currency, String>> {
    let trimmed = text.trim_matches(' ');
    let prefixed = trimmed
        .get(..ISO_PREFIX.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(ISO_PREFIX));
    let code = if prefixed {
        trimmed[ISO_PREFIX.len()..].trim_start_matches(' ')
    } else {
        trimmed
    };
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_alphabetic()) {
        return prefixed.then(|| {
            Err(format!(
                "{} is not {ISO_PREFIX} and a three-letter ISO 4217 code: {SHAPES}",
                shown(text)
            ))
        });
    }
    Some(currency(&code.to_ascii_uppercase(), text))
}

/// The currency of a three-letter code in upper case, or why it is none (`text`: the asset
/// as given).
fn currency(code: &str, text: &str) -> Result<Currency, String> {
    crate::ap2::minor_unit_exponent(code)
        .and_then(|_| Currency::parse(code).ok())
        .ok_or_else(|| {
            format!(
                "{} is not an ISO 4217 currency code Mandate knows; a token is named by its address or CAIP-19 id (a chain's native coin by its slip44 id, bip122:000000000019d6689c085ae165831e93/slip44:0): {SHAPES}",
                shown(text)
            )
        })
}

/// Whether `text` is an on-chain address of one of the shapes of the module documentation.
fn on_chain(text: &str) -> bool {
    hex_address(text)
        || move_type(text)
        || base58(text)
        || stellar(text)
        || algorand(text)
        || hedera(text)
        || keeta(text)
}

/// `0x` and 1 to 64 hex digits (EVM's 40, Aptos's and Sui's 64, short forms like `0x2`).
fn hex_address(text: &str) -> bool {
    text.strip_prefix("0x").is_some_and(|hex| {
        (1..=64).contains(&hex.len()) && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

/// A Move coin type: `0x<address>::<module>::<name>` (`0x2::sui::SUI`).
fn move_type(text: &str) -> bool {
    let parts: Vec<&str> = text.split("::").collect();
    let ident = |s: &str| {
        s.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    matches!(parts.as_slice(), [address, module, name] if hex_address(address) && ident(module) && ident(name))
}

/// 32 to 44 characters of Bitcoin's base58 alphabet (Solana mints, Tron addresses).
fn base58(text: &str) -> bool {
    const ALPHABET: &[u8] = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
    (32..=44).contains(&text.len()) && text.bytes().all(|b| ALPHABET.contains(&b))
}

/// A Stellar contract or account: 56 characters of `A-Z2-7`, starting with `C` or `G`.
fn stellar(text: &str) -> bool {
    text.len() == 56
        && (text.starts_with('C') || text.starts_with('G'))
        && text
            .bytes()
            .all(|b| b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b))
}

/// An Algorand asset id: 4 to 20 digits, no leading zero (three digits would be an ISO 4217
/// numeric code, `978` for EUR).
fn algorand(text: &str) -> bool {
    (4..=20).contains(&text.len())
        && !text.starts_with('0')
        && text.bytes().all(|b| b.is_ascii_digit())
}

/// A Hedera id: `shard.realm.num` (`0.0.456858`).
fn hedera(text: &str) -> bool {
    let parts: Vec<&str> = text.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| (1..=20).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()))
}

/// A Keeta token: `keeta_` and 20 to 100 characters of `a-z2-7`.
fn keeta(text: &str) -> bool {
    text.strip_prefix("keeta_").is_some_and(|rest| {
        (20..=100).contains(&rest.len())
            && rest
                .bytes()
                .all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(&b))
    })
}

/// A CAIP-19 asset type or id, `chain_id/asset_namespace:asset_reference[/token_id]` with
/// CAIP-2's `namespace:reference` as the chain; one of the `iso4217` asset namespace is
/// fiat. `None` when `text` has not that shape.
fn caip19(text: &str) -> Option<Result<Asset, String>> {
    let parts: Vec<&str> = text.split('/').collect();
    let (chain, asset, token) = match parts.as_slice() {
        [chain, asset] => (*chain, *asset, None),
        [chain, asset, token] => (*chain, *asset, Some(*token)),
        _ => return None,
    };
    let namespace = |s: &str| {
        (3..=8).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    let reference = |s: &str, max: usize, extra: &[u8]| {
        (1..=max).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || extra.contains(&b))
    };
    let (chain_ns, chain_ref) = chain.split_once(':')?;
    let (asset_ns, asset_ref) = asset.split_once(':')?;
    let shaped = namespace(chain_ns)
        && reference(chain_ref, 32, b"-_")
        && namespace(asset_ns)
        && reference(asset_ref, 128, b"-.%")
        && token.is_none_or(|t| reference(t, 78, b"-.%"));
    if !shaped {
        return None;
    }
    if asset_ns == "iso4217" {
        let code = asset_ref.to_ascii_uppercase();
        let fiat = if code.len() == 3 && code.bytes().all(|b| b.is_ascii_alphabetic()) {
            currency(&code, text)
        } else {
            Err(format!(
                "{} names no three-letter ISO 4217 code: {SHAPES}",
                shown(text)
            ))
        };
        return Some(fiat.map(Asset::Fiat));
    }
    Some(Ok(Asset::OnChain))
}

/// The decimals of the x402 assets a service knows besides the ISO 4217 currencies (whose
/// decimals are their minor units): the ones its operator lists, each on every network or
/// on one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListedAssets {
    listed: Vec<Listed>,
}

/// One asset listed with its decimals.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listed {
    /// The CAIP-2 network it is listed on; `None` for every network.
    network: Option<String>,
    /// The asset as the requirements carry it.
    asset: String,
    /// Its decimals.
    decimals: u32,
}

/// The most decimals an asset can be listed with: an amount of more could not be held
/// exactly (`rust_decimal`'s scale).
pub const MAX_DECIMALS: u32 = 28;

impl ListedAssets {
    /// Adds an entry as an operator writes it, `[NETWORK/]ASSET=DECIMALS`
    /// (`0x036CbD53842c5426634e7929541eC2318f3dCF7e=6`,
    /// `eip155:8453/0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913=6`,
    /// `eip155:8453/erc20:0x8335…=6`); the error says what is wrong with it. An ISO 4217
    /// code is refused: its decimals are its minor units, known already.
    pub fn add(&mut self, entry: &str) -> Result<(), String> {
        let (key, decimals) = entry
            .rsplit_once('=')
            .ok_or_else(|| format!("{entry:?} is not ASSET=DECIMALS (0x036C…=6)"))?;
        let decimals: u32 = decimals
            .parse()
            .ok()
            .filter(|d| *d <= MAX_DECIMALS)
            .ok_or_else(|| {
                format!("{entry:?}: the decimals must be a whole number from 0 to {MAX_DECIMALS}")
            })?;
        let (network, asset) = match key.split_once('/') {
            // A network and a bare address; a CAIP-19 id (its own chain first) is whole.
            Some((network, asset)) if on_chain(asset) => (Some(network), asset),
            _ => (None, key),
        };
        match read(asset) {
            Ok(Asset::OnChain) => {}
            Ok(Asset::Fiat(code)) => {
                return Err(format!(
                    "{entry:?}: {code} is an ISO 4217 currency: its decimals are its minor units, known already; list tokens only"
                ));
            }
            Err(why) => return Err(format!("{entry:?}: {why}")),
        }
        if let Some(network) = network {
            let caip2 = network.split_once(':').is_some_and(|(ns, reference)| {
                (3..=8).contains(&ns.len())
                    && ns
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && (1..=32).contains(&reference.len())
                    && reference
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            });
            if !caip2 {
                return Err(format!(
                    "{entry:?}: {network:?} is not a CAIP-2 network (eip155:8453)"
                ));
            }
        }
        self.listed
            .retain(|l| !(l.network.as_deref() == network && same_asset(&l.asset, asset)));
        self.listed.push(Listed {
            network: network.map(str::to_owned),
            asset: asset.to_owned(),
            decimals,
        });
        Ok(())
    }

    /// How many assets are listed.
    pub fn len(&self) -> usize {
        self.listed.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.listed.is_empty()
    }

    /// The decimals of `asset` on `network`: its minor units for an ISO 4217 currency, the
    /// listed ones for a token listed on that network or on every network (the network's
    /// first), `None` for any other asset.
    pub(crate) fn decimals(&self, network: &str, asset: &str) -> Option<u32> {
        if let Ok(Asset::Fiat(code)) = read(asset) {
            return crate::ap2::minor_unit_exponent(code.as_str());
        }
        let listed = |on: Option<&str>| {
            self.listed
                .iter()
                .find(|l| l.network.as_deref() == on && same_asset(&l.asset, asset))
                .map(|l| l.decimals)
        };
        listed(Some(network)).or_else(|| listed(None))
    }
}

/// Whether two spellings name the same asset: hex addresses without regard to letter case
/// (EVM's checksum is letter case), anything else exactly.
fn same_asset(a: &str, b: &str) -> bool {
    if hex_address(a) && hex_address(b) {
        a.eq_ignore_ascii_case(b)
    } else {
        a == b
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn iso_4217_codes_are_fiat_in_the_spellings_x402_uses() {
        for text in [
            "EUR",
            "eur",
            "Eur",
            " EUR",
            "EUR ",
            "iso4217:EUR",
            "ISO4217:eur",
            "iso4217: EUR",
            " iso4217:EUR ",
            "swift:0/iso4217:EUR",
        ] {
            assert_eq!(
                read(text),
                Ok(Asset::Fiat(Currency::parse("EUR").unwrap())),
                "{text:?}"
            );
        }
    }

    #[test]
    fn addresses_and_caip_ids_of_x402_s_schemes_are_on_chain() {
        // The assets of x402's scheme specifications, and CAIP-19's examples.
        for text in [
            "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
            "0x833589fcd6edb6e08f4c7c32d4f71b54bda02913",
            "0xbae207659db88bea0cbead6da0ed00aac12edcdda169e591cd41c94180b46f3b",
            "0x2::sui::SUI",
            "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v",
            "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t",
            "CBIELTK6YBZJU5UP2WWQEUCYKLPU6AUNZ2BQ4WWFEIE3USCIHMXQDAMA",
            "31566704",
            "0.0.0",
            "0.0.456858",
            "keeta_amnkge74xitii5dsobstldatv3irmyimujfjotftx7plaaaseam4bntb7wnna",
            "eip155:1/erc20:0x6b175474e89094c44da98b954eedeac495271d0f",
            "eip155:1/erc721:0x06012c8cf97BEaD5deAe237070F9587f8E7A266d/771769",
            "bip122:000000000019d6689c085ae165831e93/slip44:0",
            "cosmos:cosmoshub-3/slip44:118",
        ] {
            assert_eq!(read(text), Ok(Asset::OnChain), "{text:?}");
        }
    }

    #[test]
    fn any_other_spelling_is_refused_naming_it() {
        for (text, says) in [
            ("ＥＵＲ", "U+FF25"),
            ("EUR\u{200b}", "U+200B"),
            ("\u{200b}EUR", "U+200B"),
            ("EUR\0", "U+0000"),
            ("\u{a0}EUR", "U+00A0"),
            ("\tEUR", "U+0009"),
            ("ÉUR", "U+00C9"),
            ("\u{395}UR", "U+0395"),
            ("iso-4217:EUR", "is not one"),
            ("ISO 4217:EUR", "is not one"),
            ("fiat:EUR", "is not one"),
            ("EU R", "is not one"),
            ("USDC", "is not one"),
            ("usd coin", "is not one"),
            ("iso4217:XYZ", "not an ISO 4217 currency code Mandate knows"),
            ("iso4217:EURO", "is not iso4217: and a three-letter"),
            ("XYZ", "not an ISO 4217 currency code Mandate knows"),
            ("BTC", "slip44"),
            ("978", "is not one"),
            ("0X036CbD53842c5426634e7929541eC2318f3dCF7e", "is not one"),
            ("0x036CbD53842c5426634e7929541eC2318f3dCF7g", "is not one"),
            ("swift:0/iso4217:EURO", "names no three-letter"),
        ] {
            let why = read(text).unwrap_err();
            assert!(why.contains(says), "{text:?}: {why}");
            assert!(why.contains("an x402 asset is"), "{text:?}: {why}");
            assert!(
                !why.contains(['\u{200b}', '\0', '\u{a0}']),
                "{text:?}: {why}"
            );
        }
    }

    #[test]
    fn listed_assets_give_their_decimals_and_fiat_its_minor_units() {
        let mut listed = ListedAssets::default();
        listed
            .add("0x036CbD53842c5426634e7929541eC2318f3dCF7e=6")
            .unwrap();
        listed
            .add("eip155:1/0x036cbd53842c5426634e7929541ec2318f3dcf7e=18")
            .unwrap();
        listed.add("eip155:1/erc20:0x6b17=18").unwrap();
        assert_eq!(listed.len(), 3);
        let usdc = "0x036cbd53842C5426634e7929541eC2318f3dCF7e";
        assert_eq!(listed.decimals("eip155:84532", usdc), Some(6));
        assert_eq!(listed.decimals("eip155:1", usdc), Some(18));
        assert_eq!(
            listed.decimals("eip155:1", "eip155:1/erc20:0x6b17"),
            Some(18)
        );
        assert_eq!(listed.decimals("eip155:1", "0x2::sui::SUI"), None);
        assert_eq!(listed.decimals("cloudflare:402", "USD"), Some(2));
        assert_eq!(listed.decimals("x:y", "iso4217:jpy"), Some(0));
        assert_eq!(listed.decimals("x:y", "KWD"), Some(3));
        // Listed again: the later decimals.
        listed
            .add("0x036CBD53842C5426634E7929541EC2318F3DCF7E=2")
            .unwrap();
        assert_eq!(listed.len(), 3);
        assert_eq!(listed.decimals("eip155:84532", usdc), Some(2));
        for (entry, says) in [
            ("0x036C", "not ASSET=DECIMALS"),
            ("0x036C=x", "whole number from 0 to 28"),
            ("0x036C=29", "whole number from 0 to 28"),
            ("USD=6", "ISO 4217 currency"),
            ("USDC=6", "is not one"),
            ("eip 155/0x036C=6", "not a CAIP-2 network"),
        ] {
            let why = listed.add(entry).unwrap_err();
            assert!(why.contains(says), "{entry}: {why}");
        }
    }
}
