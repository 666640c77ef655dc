// The typed face of the WebAssembly module, the same for Node and for browsers: the
// caller's objects go in as JSON text (amounts are decimal strings, so no float is ever
// made of one), the answer comes back as JSON, and a refusal is thrown as a CheckError
// whose `code` is the Rust check's refusal code.

/** The check refused the token; `code` is the Rust refusal's code (`wrong_amount`, …). */
export class CheckError extends Error {
  constructor(failure) {
    super(failure.message);
    this.name = "CheckError";
    this.code = failure.code;
    this.objections = failure.objections;
    this.claims = failure.claims ?? null;
  }
}

/** The arguments are wrong (a member missing, an amount given as a number, …). */
export class InputError extends TypeError {
  constructor(message) {
    super(message);
    this.name = "InputError";
    this.code = "invalid_input";
  }
}

/** JSON text of `value`, or an InputError naming `what`. */
function json(value, what) {
  if (value === null || typeof value !== "object") {
    throw new InputError(`${what} must be an object`);
  }
  return JSON.stringify(value);
}

/** The key set as JSON text: the fetched bytes, their text, or the parsed object. */
function keySetText(keySet) {
  if (typeof keySet === "string") return keySet;
  if (keySet instanceof Uint8Array) return new TextDecoder().decode(keySet);
  return json(keySet, "keySet");
}

/** The options as JSON text, `now` the current time when left out. */
function optionsText(options) {
  const given = { ...(options ?? {}) };
  if (given.now === undefined || given.now === null) {
    given.now = Math.floor(Date.now() / 1000);
  } else if (given.now instanceof Date) {
    given.now = Math.floor(given.now.getTime() / 1000);
  }
  return JSON.stringify(given);
}

/**
 * The API over `native` (the wasm-bindgen module), usable once `isReady()` holds.
 */
export function makeApi(native, isReady) {
  class Checker {
    #inner = null;

    /** The whole check; the verified verdict, or a thrown CheckError or InputError. */
    check(token, expected, keySet, options) {
      if (!isReady()) {
        throw new Error("the WebAssembly module is not loaded yet: await init() first");
      }
      if (typeof token !== "string") {
        throw new InputError("token must be the verdict token, a string");
      }
      const args = [token, json(expected, "expected"), keySetText(keySet), optionsText(options)];
      this.#inner ??= new native.Checker();
      let answer;
      try {
        answer = this.#inner.checkJson(...args);
      } catch (thrown) {
        if (typeof thrown !== "string") throw thrown;
        const failure = JSON.parse(thrown);
        throw failure.kind === "input" ? new InputError(failure.message) : new CheckError(failure);
      }
      return JSON.parse(answer);
    }
  }

  // The module-level check keeps one checker, so that a token is accepted once per process.
  let shared = null;
  function check(token, expected, keySet, options) {
    shared ??= new Checker();
    return shared.check(token, expected, keySet, options);
  }
  return { Checker, check };
}
