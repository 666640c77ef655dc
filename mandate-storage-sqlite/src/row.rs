//! SQLite's rows as the boundary reads them. A module of its own, below both the
//! transaction (`tx.rs`) and the decision reads (`decisions.rs`), which each read rows.

use mandate_storage::engine::{Columns, Result};

/// A row as the boundary reads it.
pub struct SqliteRow<'r, 's>(pub &'r rusqlite::Row<'s>);

impl Columns for SqliteRow<'_, '_> {
    fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        self.0.get(i).map_err(crate::sqlite_error)
    }

    fn opt_text(&self, i: usize) -> Result<Option<String>> {
        self.0.get(i).map_err(crate::sqlite_error)
    }

    fn opt_bytes(&self, i: usize) -> Result<Option<Vec<u8>>> {
        self.0.get(i).map_err(crate::sqlite_error)
    }

    fn opt_flag(&self, i: usize) -> Result<Option<bool>> {
        self.0.get(i).map_err(crate::sqlite_error)
    }
}
