//! Tests of the PostgreSQL engine against a real database.
