//! `#[on_each_engine]`: one test of Mandate's API suite run on every storage engine.
//!
//! On an `async fn NAME()` of a test module of `mandate-server/tests/api`, it keeps the
//! function as written (not a test) and adds a module `NAME` with one `#[tokio::test]` an
//! engine, `NAME::sqlite` and `NAME::postgres`, each running the function inside
//! `crate::engine::scope`, which tells the suite's helpers which database to start the
//! server on. The attribute's arguments go to `tokio::test` (`flavor = "multi_thread"`,
//! `worker_threads = 2`), but for a first `postgres_only`, which adds only the PostgreSQL
//! variant (a test of what PostgreSQL itself keeps).
//!
//! The PostgreSQL variant first asks `crate::engine::postgres_available()`: without
//! PostgreSQL it returns after the suite has said, once, that the PostgreSQL tests were
//! skipped (with `MANDATE_REQUIRE_POSTGRES=1` that call fails the test instead).

use proc_macro::TokenStream;
use quote::{format_ident, quote};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{ItemFn, Meta, Token, parse_macro_input};

/// See the crate's documentation.
#[proc_macro_attribute]
pub fn on_each_engine(attr: TokenStream, item: TokenStream) -> TokenStream {
    let function = parse_macro_input!(item as ItemFn);
    let metas = match Punctuated::<Meta, Token![,]>::parse_terminated.parse(attr) {
        Ok(metas) => metas,
        Err(e) => return e.to_compile_error().into(),
    };
    let mut postgres_only = false;
    let mut tokio_args = Vec::new();
    for meta in metas {
        if meta.path().is_ident("postgres_only") {
            postgres_only = true;
        } else {
            tokio_args.push(meta);
        }
    }
    if function.sig.asyncness.is_none() || !function.sig.inputs.is_empty() {
        return syn::Error::new_spanned(
            &function.sig,
            "#[on_each_engine] takes an `async fn` without arguments",
        )
        .to_compile_error()
        .into();
    }
    let name = &function.sig.ident;
    let tokio_test = if tokio_args.is_empty() {
        quote!(#[tokio::test])
    } else {
        quote!(#[tokio::test(#(#tokio_args),*)])
    };
    let sqlite_fn = format_ident!("sqlite");
    let sqlite = (!postgres_only).then(|| {
        quote! {
            #tokio_test
            async fn #sqlite_fn() {
                crate::engine::scope(crate::engine::Engine::Sqlite, super::#name()).await;
            }
        }
    });
    quote! {
        #function

        mod #name {
            #sqlite

            #tokio_test
            async fn postgres() {
                if !crate::engine::postgres_available() {
                    return;
                }
                crate::engine::scope(crate::engine::Engine::Postgres, super::#name()).await;
            }
        }
    }
    .into()
}
