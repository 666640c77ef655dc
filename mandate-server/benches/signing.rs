//! Benchmarks of the server's ES256 signing: a whole aws-lc signature, making a presignature
//! (the idle-time half, 64 a batch, as the pool's thread does) and finishing them (the
//! request's half, 64 an iteration). See `mandate-server/src/signing/presign.rs`.
//!
//! Run with `cargo bench -p mandate-server --bench signing`; add
//! `-- --warm-up-time 1 --measurement-time 3` for a quick pass.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use mandate_core::Signer;
use mandate_server::signing::fast::AwsLcSigner;
use mandate_server::signing::presign::{self, Presignature};
use p256::{FieldBytes, NonZeroScalar};

const SECRET: [u8; 32] = [7; 32];
/// About the size of a verdict's JWS signing input.
const INPUT: [u8; 480] = [b'x'; 480];

fn bench_signing(c: &mut Criterion) {
    // aws-lc-rs directly: `AwsLcSigner::sign` would take from the presign pool.
    let public = AwsLcSigner::from_secret_bytes("k", &SECRET)
        .unwrap()
        .public_jwk()
        .verifying_key()
        .to_sec1_point(false);
    let whole = EcdsaKeyPair::from_private_key_and_public_key(
        &ECDSA_P256_SHA256_FIXED_SIGNING,
        &SECRET,
        public.as_bytes(),
    )
    .unwrap();
    let rng = SystemRandom::new();
    c.bench_function("aws_lc_sign_whole", |b| {
        b.iter(|| whole.sign(&rng, black_box(&INPUT)).unwrap())
    });
    c.bench_function("presign_batch_of_64", |b| {
        b.iter(|| presign::compute(64).unwrap())
    });
    let secret: NonZeroScalar =
        Option::from(NonZeroScalar::from_repr(FieldBytes::from(SECRET))).unwrap();
    // 64 presignatures finished an iteration: divide by 64.
    c.bench_function("presigned_finish_64", |b| {
        b.iter_batched(
            || presign::compute(64).unwrap(),
            |batch: Vec<Presignature>| {
                for pre in batch {
                    black_box(pre.sign(&secret, black_box(&INPUT)).unwrap());
                }
            },
            BatchSize::LargeInput,
        )
    });
}

criterion_group!(benches, bench_signing);
criterion_main!(benches);
