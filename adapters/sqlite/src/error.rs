//! How SQLite's errors are classified, once, for every file of this adapter.

use rebound_store::StoreError;

/// Classifies a SQLite error once: what the database or the machine could not do (busy or
/// locked past the timeout, I/O, a full disk, a file that cannot be opened or is damaged) is
/// an outage; everything else (constraint or statement errors, a column read as the wrong
/// type, misuse) is a bug in this file.
pub(crate) fn sql_err(e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode as C;
    let outage = match &e {
        rusqlite::Error::SqliteFailure(f, _) => matches!(
            f.code,
            C::DatabaseBusy
                | C::DatabaseLocked
                | C::SystemIoFailure
                | C::DiskFull
                | C::CannotOpen
                | C::OutOfMemory
                | C::FileLockingProtocolFailed
                | C::ReadOnly
                | C::DatabaseCorrupt
                | C::NotADatabase
                | C::PermissionDenied
                | C::OperationInterrupted
        ),
        _ => false,
    };
    if outage {
        StoreError::unavailable("SQLite", e)
    } else {
        StoreError::Internal(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    #[test]
    fn sqlite_errors_are_an_outage_only_when_the_database_or_machine_failed() {
        let failure = |code: i32| rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None);
        let outage = |e: rusqlite::Error| matches!(sql_err(e), StoreError::Unavailable { .. });
        assert!(outage(failure(rusqlite::ffi::SQLITE_BUSY)));
        assert!(outage(failure(rusqlite::ffi::SQLITE_IOERR)));
        assert!(outage(failure(rusqlite::ffi::SQLITE_FULL)));
        // An outage keeps SQLite's error whole, for whoever looks at its code.
        let busy = sql_err(failure(rusqlite::ffi::SQLITE_BUSY));
        let kept = std::error::Error::source(&busy).and_then(|s| s.downcast_ref::<rusqlite::Error>());
        assert_eq!(
            kept.and_then(rusqlite::Error::sqlite_error_code),
            Some(rusqlite::ErrorCode::DatabaseBusy)
        );
        assert!(!outage(failure(rusqlite::ffi::SQLITE_CONSTRAINT)));
        assert!(!outage(failure(rusqlite::ffi::SQLITE_MISUSE)));
        assert!(!outage(rusqlite::Error::InvalidColumnType(
            0,
            "x".into(),
            rusqlite::types::Type::Null
        )));
        // A real statement error: a bug, not an outage.
        let conn = Connection::open_in_memory().unwrap();
        let e = conn.execute("INSERT INTO no_such_table VALUES (1)", []).unwrap_err();
        assert!(matches!(sql_err(e), StoreError::Internal(_)));
    }
}
