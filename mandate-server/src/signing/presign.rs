//! Offline/online ECDSA: the nonce half of each signature computed ahead, in idle CPU time.
//!
//! An ES256 signature of a message with hash `z` under the secret `d` is `(r, s)` with `r` the
//! x coordinate of `k·G` reduced mod `n` and `s = k⁻¹·(z + r·d) mod n`, for a fresh random
//! `k`. Everything expensive (`k`, the point `k·G`, `k⁻¹`) depends on neither the message
//! nor the key, so it can be computed before the request arrives: that pair `(r, k⁻¹)` is a
//! [`Presignature`]. What is left when the message is known is one SHA-256 and two products
//! mod `n`, a small fraction of a whole signature (`cargo bench -p mandate-server --bench
//! signing`; figures in docs/performance.md). This is the classic offline/online split of
//! ECDSA (OpenSSL's `ECDSA_sign_setup`).
//!
//! A whole signature is a large share of an authorization's CPU, and the closed loop
//! leaves part of the cores idle while requests wait for their group's fsync. The
//! [`Pool`]'s thread runs at the lowest scheduling priority (`SCHED_IDLE` on Linux), so it
//! fills the pool in that idle time and never takes a core from a request; when the pool is
//! empty (at saturation there is little idle time) the signing thread makes a batch of
//! presignatures for itself ([`Pool::take_or_make`]). A request never waits for the pool's
//! lock either: a thread at idle priority preempted while holding it would hold every
//! taker until a core fell idle (priority inversion), so a take that finds the lock held
//! goes on as if the pool were empty ([`Pool::take`]).
//!
//! The thread tops the pool up as soon as one batch has been taken, rather than letting it
//! fall to half and refilling it at once. At idle priority it takes no core from a request,
//! but a long refill keeps both cores busy for a long stretch, and such stretches made the
//! latency tail at moderate rates; short top-ups spread the same work thinly
//! (docs/performance.md).
//!
//! Safety of the split: `k` comes from aws-lc's generator, uniform in `[1, n)`, exactly as
//! in its own signing; a presignature is moved out of the pool, used once and wiped on drop;
//! it holds no part of any key, so one pool serves every key of the process.

use std::cell::RefCell;
use std::sync::{Arc, Condvar, Mutex, OnceLock, TryLockError};

use aws_lc_rs::agreement::{ECDH_P256, PrivateKey};
use aws_lc_rs::encoding::{AsBigEndian, EcPrivateKeyBin};
use p256::elliptic_curve::Field;
use p256::elliptic_curve::ff::{BatchInvert, PrimeField};
use p256::elliptic_curve::ops::Reduce;
use p256::elliptic_curve::scalar::IsHigh as _;
use p256::elliptic_curve::subtle::ConditionallySelectable as _;
use p256::elliptic_curve::zeroize::{Zeroize, Zeroizing};
use p256::{FieldBytes, NonZeroScalar, Scalar};

/// How many presignatures the process's pool holds at most: 64 bytes each, 4 MiB in all.
///
/// The idle time comes in bursts: the pool must hold enough to carry the requests through a
/// stretch without idle time, and room for what the thread makes in the next idle one.
/// Smaller pools ran dry at full speed while the thread slept on a full pool at other
/// moments (docs/performance.md).
pub const POOL_CAPACITY: usize = 65_536;

/// How many presignatures the pool's thread computes between two visits to the pool: their
/// inverses share one inversion (Montgomery's trick).
const BATCH: usize = 64;

/// How many presignatures a request's thread computes for itself when the pool is empty.
///
/// At saturation the cores have little idle time and the pool's thread falls behind, so
/// the pool empties. A thread that finds it empty makes a batch of this many (one inversion
/// for the batch, so each costs less than a whole signature) and keeps the rest for its
/// next signatures. The batch is small because the thread's other connections wait while
/// it is made (docs/performance.md).
pub const THREAD_BATCH: usize = 32;

thread_local! {
    /// The presignatures this thread made for itself (see [`Pool::take_or_make`]).
    static STASH: RefCell<Vec<Presignature>> = const { RefCell::new(Vec::new()) };
}

/// `(r, k⁻¹)` for one random `k`: everything of an ECDSA P-256 signature but the message.
pub struct Presignature {
    r: Scalar,
    k_inv: Scalar,
}

impl Drop for Presignature {
    fn drop(&mut self) {
        self.k_inv.zeroize();
        self.r.zeroize();
    }
}

impl Presignature {
    /// All zeros: what a slot of the pool holds once its presignature is taken.
    const WIPED: Presignature = Presignature {
        r: Scalar::ZERO,
        k_inv: Scalar::ZERO,
    };

    /// Finishes the signature of `signing_input` (hashed here with SHA-256) under `secret`:
    /// `r || s`, 32 bytes each, big-endian. `None` only if `s` came out zero (probability
    /// about 2⁻²⁵⁶), in which case the caller signs with a fresh nonce instead.
    pub fn sign(self, secret: &NonZeroScalar, signing_input: &[u8]) -> Option<[u8; 64]> {
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, signing_input);
        // bits2int: for P-256 and SHA-256 the hash is as wide as the order, so it is the
        // hash's integer reduced mod n.
        let z = <Scalar as Reduce<FieldBytes>>::reduce(&FieldBytes::from(
            <[u8; 32]>::try_from(digest.as_ref()).ok()?,
        ));
        let s = self.k_inv * (z + self.r * secret.as_ref());
        if bool::from(s.is_zero()) {
            return None;
        }
        // (r, s) and (r, n - s) both verify in ECDSA; the core's verifier accepts only
        // the low one (one verdict, one token text), so the high one is never emitted.
        let s = Scalar::conditional_select(&s, &-s, s.is_high());
        let mut out = [0u8; 64];
        out[..32].copy_from_slice(&self.r.to_repr());
        out[32..].copy_from_slice(&s.to_repr());
        Some(out)
    }
}

/// Computes `count` presignatures; `None` if aws-lc failed to draw or multiply (it does not,
/// short of a broken build).
pub fn compute(count: usize) -> Option<Vec<Presignature>> {
    // The nonces, then their inverses: wiped however this returns.
    let mut ks = Zeroizing::new(Vec::with_capacity(count));
    let mut rs = Vec::with_capacity(count);
    while ks.len() < count {
        // An ECDH key pair is exactly a uniform k in [1, n) and the point k·G, computed by
        // aws-lc's constant-time P-256 code with its precomputed table of G's multiples.
        let pair = PrivateKey::generate(&ECDH_P256).ok()?;
        let point = pair.compute_public_key().ok()?;
        let k_bin: EcPrivateKeyBin<'static> = pair.as_be_bytes().ok()?;
        let mut k_bytes = FieldBytes::default();
        k_bytes.copy_from_slice(k_bin.as_ref());
        let k = Option::<Scalar>::from(Scalar::from_repr(k_bytes));
        k_bytes.zeroize();
        let k = k?;
        // The uncompressed point is 0x04 || x || y.
        let x = point.as_ref().get(1..33)?;
        let r = <Scalar as Reduce<FieldBytes>>::reduce(&FieldBytes::from(
            <[u8; 32]>::try_from(x).ok()?,
        ));
        if bool::from(r.is_zero()) || bool::from(k.is_zero()) {
            continue;
        }
        ks.push(k);
        rs.push(r);
    }
    // k⁻¹ for all of them with one inversion.
    ks.iter_mut().batch_invert();
    let presignatures = ks
        .iter()
        .zip(&rs)
        .map(|(&k_inv, &r)| Presignature { r, k_inv })
        .collect();
    Some(presignatures)
}

struct Shared {
    capacity: usize,
    ready: Mutex<Vec<Presignature>>,
    /// Signalled when takes leave room for a batch (the thread may be waiting).
    wanted: Condvar,
}

/// Presignatures made ahead by a thread at idle priority.
#[derive(Clone)]
pub struct Pool {
    shared: Arc<Shared>,
}

impl Pool {
    /// The process's pool, its thread started on first use.
    pub fn global() -> &'static Pool {
        static POOL: OnceLock<Pool> = OnceLock::new();
        POOL.get_or_init(|| Pool::start(POOL_CAPACITY))
    }

    /// A new pool of `capacity` and its thread (the server uses [`Pool::global`]).
    pub(crate) fn start(capacity: usize) -> Pool {
        let capacity = capacity.max(2 * BATCH);
        let shared = Arc::new(Shared {
            capacity,
            ready: Mutex::new(Vec::with_capacity(capacity)),
            wanted: Condvar::new(),
        });
        let pool = Pool { shared };
        let worker = pool.clone();
        let spawned = std::thread::Builder::new()
            .name("presign".into())
            .spawn(move || worker.fill_forever());
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no presign thread: every signature is computed whole");
        }
        pool
    }

    /// One presignature, if the pool has one and nobody holds the pool at this instant.
    ///
    /// It never waits for the lock: the pool's own thread runs at `SCHED_IDLE`, and if a
    /// request's thread preempted it while it held the lock (adding a batch), waiting
    /// would leave that request, and every one behind it on its worker, until a core next
    /// falls idle (milliseconds on busy cores). The caller goes on as if the pool were
    /// empty ([`Pool::take_or_make`]).
    pub fn take(&self) -> Option<Presignature> {
        let mut ready = match self.shared.ready.try_lock() {
            Ok(ready) => ready,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        let taken = ready.pop();
        // The slot it leaves keeps its bytes until overwritten: wipe them.
        if let Some(slot) = ready.spare_capacity_mut().first_mut() {
            slot.write(Presignature::WIPED);
        }
        if ready.len() == self.shared.capacity - BATCH {
            self.shared.wanted.notify_one();
        }
        taken
    }

    /// A presignature for a signature about to be made on this thread: from the pool if
    /// it has one; else from this thread's own stash, refilled first with a batch of
    /// [`THREAD_BATCH`] computed here when empty. `None` only if aws-lc fails to make one.
    pub fn take_or_make(&self) -> Option<Presignature> {
        if let Some(pre) = self.take() {
            return Some(pre);
        }
        STASH.with_borrow_mut(|stash| {
            if stash.is_empty() {
                *stash = compute(THREAD_BATCH)?;
            }
            let taken = stash.pop();
            // As in `take`: the slot it leaves keeps its bytes until overwritten.
            if let Some(slot) = stash.spare_capacity_mut().first_mut() {
                slot.write(Presignature::WIPED);
            }
            taken
        })
    }

    /// How many presignatures are ready.
    pub fn len(&self) -> usize {
        self.shared
            .ready
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// Whether none is ready.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn fill_forever(&self) {
        lower_priority();
        loop {
            {
                let mut ready = self.shared.ready.lock().unwrap_or_else(|p| p.into_inner());
                while ready.len() > self.shared.capacity - BATCH {
                    ready = self
                        .shared
                        .wanted
                        .wait(ready)
                        .unwrap_or_else(|p| p.into_inner());
                }
            }
            let Some(batch) = compute(BATCH) else {
                tracing::error!("presign: aws-lc failed; every signature is computed whole");
                return;
            };
            let mut ready = self.shared.ready.lock().unwrap_or_else(|p| p.into_inner());
            // Copied in, so that dropping `batch` wipes its own buffer.
            ready.extend(batch.iter().map(|pre| Presignature {
                r: pre.r,
                k_inv: pre.k_inv,
            }));
        }
    }
}

/// Puts the calling thread at the lowest priority the OS has: `SCHED_IDLE` on Linux, which
/// runs it only when a core would otherwise be idle; the lowest priority elsewhere.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn lower_priority() {
    use thread_priority::{
        NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy,
        set_thread_priority_and_policy, thread_native_id,
    };
    let policy = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
    if let Err(e) = set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, policy)
    {
        tracing::warn!(error = ?e, "presign thread left at normal priority");
    }
}

/// Puts the calling thread at the lowest priority the OS has.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn lower_priority() {
    if let Err(e) =
        thread_priority::set_current_thread_priority(thread_priority::ThreadPriority::Min)
    {
        tracing::warn!(error = ?e, "presign thread left at normal priority");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use mandate_core::{P256Signer, Signer};
    use mandate_protocol::jws::verify_es256;

    const SECRET: [u8; 32] = [7; 32];
    /// A smaller pool than the server's, so that debug builds fill it quickly.
    const CAPACITY: usize = 4096;

    fn secret() -> NonZeroScalar {
        Option::from(NonZeroScalar::from_repr(FieldBytes::from(SECRET))).unwrap()
    }

    #[test]
    fn presigned_signatures_verify_and_never_repeat_a_nonce() {
        let jwk = P256Signer::from_secret_bytes("k", &SECRET)
            .unwrap()
            .public_jwk();
        let mut seen = std::collections::HashSet::new();
        for (i, pre) in compute(200).unwrap().into_iter().enumerate() {
            let message = format!("header.claims-{i}");
            let sig = pre.sign(&secret(), message.as_bytes()).unwrap();
            assert!(verify_es256(&jwk, message.as_bytes(), &sig));
            assert!(!verify_es256(&jwk, b"another message", &sig));
            assert!(seen.insert(sig[..32].to_vec()), "r repeated");
        }
    }

    fn wait_for(pool: &Pool, len: usize) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while pool.len() < len {
            assert!(
                std::time::Instant::now() < deadline,
                "the pool stayed at {} of {len}",
                pool.len()
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// One presignature from a pool that has some: `take` gives none while the pool's
    /// thread holds the lock for an instant.
    fn take(pool: &Pool) -> Presignature {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if let Some(pre) = pool.take() {
                return pre;
            }
            assert!(std::time::Instant::now() < deadline, "the pool stayed busy");
            std::thread::yield_now();
        }
    }

    /// A take never waits for the lock (the pool's thread, at idle priority, may hold it
    /// while preempted): with the lock held elsewhere it answers `None` at once.
    #[test]
    fn a_take_does_not_wait_for_a_held_pool() {
        let pool = Pool::start(CAPACITY);
        wait_for(&pool, BATCH);
        let held = pool.shared.ready.lock().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let taker = pool.clone();
        let thread = std::thread::spawn(move || tx.send(taker.take().is_none()).unwrap());
        let answer = rx.recv_timeout(std::time::Duration::from_secs(2));
        drop(held);
        thread.join().unwrap();
        assert_eq!(
            answer,
            Ok(true),
            "take waited for the lock or found it free"
        );
        // Released, the pool hands presignatures out again.
        take(&pool);
    }

    /// With the pool unavailable (its lock held here, as when it is empty), a thread makes
    /// its own batch and uses it up before making another: every presignature distinct and
    /// good.
    #[test]
    fn a_thread_makes_its_own_batch_when_the_pool_has_none() {
        let pool = Pool::start(CAPACITY);
        let held = pool.shared.ready.lock().unwrap();
        let taker = pool.clone();
        let jwk = P256Signer::from_secret_bytes("k", &SECRET)
            .unwrap()
            .public_jwk();
        let (made, stashed) = std::thread::spawn(move || {
            let mut rs = std::collections::HashSet::new();
            let mut stashed = Vec::new();
            for i in 0..2 * THREAD_BATCH + 1 {
                let pre = taker.take_or_make().unwrap();
                stashed.push(STASH.with_borrow(Vec::len));
                let message = format!("header.claims-{i}");
                let r = pre.r.to_repr().to_vec();
                let sig = pre.sign(&secret(), message.as_bytes()).unwrap();
                assert!(verify_es256(&jwk, message.as_bytes(), &sig));
                assert!(rs.insert(r), "r repeated");
            }
            (rs.len(), stashed)
        })
        .join()
        .unwrap();
        drop(held);
        assert_eq!(made, 2 * THREAD_BATCH + 1);
        // A batch at the first take, used up, then another.
        assert_eq!(stashed[0], THREAD_BATCH - 1);
        assert_eq!(stashed[THREAD_BATCH - 1], 0);
        assert_eq!(stashed[THREAD_BATCH], THREAD_BATCH - 1);
    }

    /// The thread fills the pool, stops when it is full, starts again as soon as a whole
    /// batch has been taken, and takers on several threads never get the same presignature
    /// twice.
    #[test]
    fn the_pool_refills_and_hands_each_presignature_out_once() {
        let pool = Pool::start(CAPACITY);
        wait_for(&pool, CAPACITY);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(pool.len(), CAPACITY, "it never holds more");
        // Less than a batch taken: no room for one, the thread stays asleep.
        let mut taken: Vec<Presignature> = (0..BATCH - 1).map(|_| take(&pool)).collect();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(pool.len(), CAPACITY - (BATCH - 1));
        // One more makes room for a whole batch: the thread is woken and fills it up.
        taken.push(take(&pool));
        wait_for(&pool, CAPACITY);
        // Four threads empty it at once.
        let drained = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        let mut mine = Vec::new();
                        while mine.len() < CAPACITY / 4 {
                            if let Some(pre) = pool.take() {
                                mine.push(pre);
                            }
                        }
                        mine
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        });
        taken.extend(drained);
        let distinct = taken
            .iter()
            .map(|pre| pre.r.to_repr().to_vec())
            .collect::<std::collections::HashSet<_>>();
        assert_eq!(distinct.len(), taken.len());
    }

    /// The pool's thread runs under `SCHED_IDLE` (policy 5, the 41st field of its `stat`),
    /// so it never takes a core from a request.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_pool_thread_runs_at_idle_priority() {
        let _pool = Pool::start(CAPACITY);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let policies: Vec<String> = std::fs::read_dir("/proc/self/task")
                .unwrap()
                .filter_map(|task| {
                    let dir = task.ok()?.path();
                    let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
                    if comm.trim() != "presign" {
                        return None;
                    }
                    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
                    // The fields after the parenthesised command name start at the 3rd.
                    let after = &stat[stat.rfind(')')? + 2..];
                    after.split(' ').nth(41 - 3).map(str::to_owned)
                })
                .collect();
            if !policies.is_empty() && policies.iter().all(|p| p == "5") {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "presign threads' policies: {policies:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}
