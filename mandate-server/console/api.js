// Talking to the API host: the organization key goes in the Authorization header of each
// request and nowhere else; every error becomes an ApiError with the server's words and
// request id; numbers are kept as the exact text the server sent (amounts are decimals).

/** An answer that is not a success, or a request that got no answer. */
export class ApiError extends Error {
  constructor({ status = 0, code = "network_error", message, requestId = null }) {
    super(message);
    this.status = status;
    this.code = code;
    this.requestId = requestId;
  }

  /** The error in words, with the request id to quote to an operator. */
  describe() {
    const where = this.status ? `HTTP ${this.status}, ${this.code}` : this.code;
    const id = this.requestId ? ` Request id: ${this.requestId}.` : "";
    return `${this.message} (${where}).${id}`;
  }
}

/**
 * JSON with every number kept as the text it was written with: "120.00" stays "120.00"
 * (never 120 through floating point). Uses the reviver's source text; a browser without it
 * falls back to the number's own text.
 */
export function parseExact(text) {
  return JSON.parse(text, (_key, value, context) => {
    if (typeof value === "number") {
      return context && typeof context.source === "string" ? context.source : String(value);
    }
    return value;
  });
}

/** A client of the API host at `apiUrl` acting with `key`. */
export function client(apiUrl, key) {
  async function call(method, path, { query, body } = {}) {
    const url = new URL(apiUrl + path);
    for (const [name, value] of Object.entries(query || {})) {
      if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, value);
    }
    const headers = { Authorization: `Bearer ${key}` };
    const init = { method, headers, cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer" };
    if (method === "POST") {
      // A retried POST (after a network failure) must not act twice.
      headers["Idempotency-Key"] = crypto.randomUUID();
      if (body !== undefined) {
        headers["Content-Type"] = "application/json";
        init.body = JSON.stringify(body);
      }
    }
    let response;
    try {
      response = await fetch(url, init);
    } catch (e) {
      throw new ApiError({
        message:
          `The API host at ${apiUrl} could not be reached. Is the server running, and does it ` +
          `allow this page's origin (${location.origin}) with --console-origin?`,
      });
    }
    const text = await response.text();
    let data = null;
    try {
      data = text ? parseExact(text) : null;
    } catch (e) {
      data = null;
    }
    if (!response.ok) {
      const error = data && data.error;
      throw new ApiError({
        status: response.status,
        code: (error && error.code) || "http_error",
        message: (error && error.message) || `The API host answered ${response.status} without an error message`,
        requestId: (error && error.request_id) || response.headers.get("X-Request-Id"),
      });
    }
    return data;
  }

  return {
    get: (path, query) => call("GET", path, { query }),
    post: (path, body) => call("POST", path, { body }),
    /** Every item of a list, page by page, up to `max` items. */
    async all(path, query, max = 500) {
      const items = [];
      let cursor;
      do {
        const page = await call("GET", path, { query: { ...query, limit: 100, cursor } });
        items.push(...page.data);
        cursor = page.has_more ? page.next_cursor : undefined;
      } while (cursor && items.length < max);
      return items;
    },
  };
}

/** The environment an organization key acts on, from its prefix; null if it is none. */
export function keyEnvironment(key) {
  if (/^sk_sandbox_\S+$/.test(key)) return "sandbox";
  if (/^sk_live_\S+$/.test(key)) return "live";
  return null;
}
