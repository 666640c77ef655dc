// The outcome of one check as testdata/verify/cases.json writes it: the verified verdict's
// fields the cases record, or the refusal's code and its objections' codes. Shared by the
// Node tests and the page the browser test loads, so both compare the same shape.

/** Runs `run` (one check) and returns its outcome; rethrows anything but a CheckError. */
export function outcome(run) {
  try {
    const v = run();
    return {
      ok: {
        jti: v.claims.jti,
        verdict: v.claims.verdict,
        amount: v.claims.request.amount,
        currency: v.claims.request.currency,
        recipient: v.claims.request.recipient,
        kid: v.kid,
        environment: v.environment,
        unchecked: v.unchecked,
      },
    };
  } catch (e) {
    if (e?.name !== "CheckError") throw e;
    return { error: e.code, objections: e.objections.map((o) => o.code) };
  }
}

/** Every check of every case of `file` through `api`, each case with a checker of its own. */
export function outcomes(api, file) {
  const got = [];
  for (const c of file.cases) {
    const checker = new api.Checker();
    c.checks.forEach((check, i) => {
      const result = outcome(() =>
        checker.check(file.tokens[check.token], check.expected, file.key_sets[check.key_set], check.options),
      );
      got.push({ name: `${c.name} (check ${i + 1})`, outcome: result });
    });
  }
  return got;
}

/** What `file` records for each check, in the order `outcomes` runs them. */
export function recorded(file) {
  return file.cases.flatMap((c) =>
    c.checks.map((check, i) => ({ name: `${c.name} (check ${i + 1})`, outcome: check.outcome })),
  );
}
