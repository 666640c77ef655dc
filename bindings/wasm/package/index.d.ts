// Types of mandate-verify: mandate-core's counterparty check, one call.

/** An exact decimal amount, as text: "42.50". Never a number (a float rounds). */
export type Amount = string;

/** The transaction about to be settled: what the verdict must be for. */
export interface ExpectedTransaction {
  amount: Amount;
  /** Three upper-case letters: "USD". */
  currency: string;
  /** As signed: "vendor:acme". */
  recipient: string;
  /** The x402 payment: its PaymentRequirements and the asset's decimals (6 for USDC). */
  x402?: { requirements: Record<string, unknown>; decimals?: number };
  /** The AP2 open mandate's digest and the closed mandate's transaction id. */
  ap2?: { mandate?: string; transaction?: string };
  /** The ACP delegated payment allowance the payment is made under. */
  acp?: { allowance: Record<string, unknown> };
}

/** A decision's `log` member: where its verdict is in the issuer's log, with the proof. */
export interface LogEntry {
  index: number;
  checkpoint: string;
  inclusion_proof: string[];
}

/** How to check. Members are snake_case, as in Mandate's HTTP API and the Python package. */
export interface CheckOptions {
  /** The service's verdicts URL, compared exactly with `iss`. */
  issuer: string;
  /** The instant of the check: unix seconds, an RFC 3339 string or a Date; now when left out. */
  now?: number | string | Date;
  /** Which keys' verdicts are accepted: live only (the default), or sandbox too on a test system. */
  environments?: "live_only" | "live_or_sandbox";
  /** Clock skew allowed on exp and iat, in seconds. */
  leeway_secs?: number;
  /** Require proof that the verdict is in the issuer's log (the log keys are the key set's). */
  require_log?: boolean;
  /** The decision's `log` member, checked when given. */
  log?: LogEntry | null;
}

/** The issuer's JWK Set: as fetched (bytes or text) or parsed. */
export type KeySet = string | Uint8Array | { keys: unknown[] };

/** What a verdict is bound to besides the request, each claim present only when bound. */
export interface Bindings {
  ap2_mandate?: string;
  ap2_transaction?: string;
  x402_payment?: string;
  acp_allowance?: string;
  acp_checkout_session?: string;
}

/** A verdict's verified claims; `request.amount` is the exact decimal text. */
export interface VerdictClaims extends Bindings {
  iss: string;
  jti: string;
  iat: number;
  exp: number;
  verdict: string;
  policy_verdict: string;
  mandate?: string;
  policy_version: string;
  nonce: string;
  request: {
    agent: string;
    amount: Amount;
    currency: string;
    recipient: string;
    category: string;
  };
}

/** A verdict that passed every check. */
export interface Verified {
  claims: VerdictClaims;
  /** The signing key's id. */
  kid: string;
  environment: "live" | "sandbox";
  /** Bindings the token carries that were not expected, so not checked. */
  unchecked: Bindings;
}

/** Why a token itself is refused (the Rust `TokenError::code`). */
export type TokenCode =
  | "malformed"
  | "unsupported_algorithm"
  | "missing_kid"
  | "unknown_kid"
  | "signature_length"
  | "bad_signature"
  | "high_s"
  | "malformed_claims"
  | "wrong_issuer"
  | "expired"
  | "issued_in_future"
  | "not_an_object"
  | "duplicate_member"
  | "wrong_kind";

/** Why a valid token does not authorize this transaction (the Rust `Objection::code`). */
export type ObjectionCode =
  | "wrong_environment"
  | "not_allow"
  | "unknown_verdict"
  | "wrong_amount"
  | "above_maximum"
  | "wrong_currency"
  | "wrong_recipient"
  | "wrong_binding"
  | "x402_mismatch"
  | "acp_mismatch"
  | "replay"
  | "not_logged"
  | "bad_log_proof";

/** The code of a CheckError (the Rust `CheckError::code`). */
export type RefusalCode = TokenCode | ObjectionCode | "replay_guard";

/** One objection to a valid token. */
export interface Objection {
  code: ObjectionCode;
  message: string;
}

/** The check refused the token. */
export class CheckError extends Error {
  /** The token's flaw, or the first objection's code. */
  readonly code: RefusalCode;
  /** Every objection, in the check's order; empty when the token itself was refused. */
  readonly objections: Objection[];
  /** The claims, when the signature held (the issuer's, but not for this transaction). */
  readonly claims: VerdictClaims | null;
}

/** The arguments are wrong: the message names the member and what to write instead. */
export class InputError extends TypeError {
  readonly code: "invalid_input";
}

/** A verifier with its replay guard: a nonce it accepted is refused after (`replay`). */
export class Checker {
  constructor();
  /** The whole check: signature, issuer, expiry, environment, allow, the transaction, replay. */
  check(token: string, expected: ExpectedTransaction, keySet: KeySet, options: CheckOptions): Verified;
}

/** The whole check with the module's own Checker (one replay guard for the process). */
export function check(
  token: string,
  expected: ExpectedTransaction,
  keySet: KeySet,
  options: CheckOptions,
): Verified;

/**
 * Loads the WebAssembly module (browsers and edge runtimes; in Node it is ready at import):
 * from beside the package's file by default, or from `wasm` (a URL, a Response, the bytes or
 * a compiled module).
 */
export function init(wasm?: URL | string | Response | BufferSource | WebAssembly.Module): Promise<void>;
