//! The alias index: every custom alias is recorded in it before its link is inserted, so
//! a data plane learns which codes are aliases without reading the links (generated codes
//! it tells from the counter's high-water mark). A store made before the index existed
//! gets it filled once, here, before the index is declared complete.

use rebound_core::generated::{GeneratedCodes, ALIAS_INDEX_SETTING, COUNTER};
use rebound_store::{Store, StoreError};

/// Links read per page by the backfill.
const BACKFILL_PAGE: usize = 1_000;

/// Makes sure the alias index holds every alias: when the store does not say it is
/// complete (a store made by an older version, or a new one), records every link whose
/// code is not a generated code below the high-water mark, then says so. This is the only
/// read of the whole links table, once per store; on a new store it reads one empty page.
/// Returns how many codes it recorded.
pub async fn complete_the_index(store: &dyn Store, codes: &GeneratedCodes) -> Result<u64, StoreError> {
    if store.read_setting(ALIAS_INDEX_SETTING).await?.is_some() {
        return Ok(0);
    }
    // Read before the links: a code generated later is below a later mark, and an alias
    // created meanwhile is recorded by its create.
    let high_water = store.high_water(COUNTER).await?;
    let (mut cursor, mut recorded) = (None::<String>, 0u64);
    loop {
        let page = store.list_links(None, BACKFILL_PAGE, cursor.as_deref()).await?;
        for link in &page.links {
            if codes.value_of(link.code.as_bytes()).is_none_or(|v| v >= high_water) {
                store.record_alias(&link.code).await?;
                recorded += 1;
            }
        }
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    store.get_or_init_setting(ALIAS_INDEX_SETTING, "complete").await?;
    if recorded > 0 {
        tracing::info!(aliases = recorded, "alias index filled from the links made before it");
    }
    Ok(recorded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::generated::Generated;
    use rebound_core::{Link, RedirectKind};
    use rebound_store::{CounterStore, LinkReads, LinkStore, MemoryStore};

    fn link(code: &str, at: i64) -> Link {
        Link::new_active(
            code.into(),
            "https://e.com/".into(),
            RedirectKind::Found,
            false,
            at,
            "o".into(),
            None,
        )
    }

    async fn aliases(store: &MemoryStore) -> Vec<String> {
        store.list_aliases(None, 1_000_000).await.unwrap()
    }

    #[tokio::test]
    async fn a_store_made_before_the_index_gets_its_aliases_recorded_once() {
        let store = MemoryStore::new();
        let codes = GeneratedCodes::new([3; 16]);
        let block = store.lease_block(COUNTER, 3_000).await.unwrap();
        // 2,500 generated links (more than a page) and three aliases, one of which looks
        // like a generated code above the mark.
        for v in block.start..2_500 {
            if let Generated::Code(c) = codes.code_for(v) {
                store.insert_link(&link(&c, v as i64), None).await.unwrap();
            }
        }
        let Generated::Code(above) = codes.code_for(9_999) else {
            panic!()
        };
        for (i, alias) in ["my-alias", "promo", above.as_str()].iter().enumerate() {
            store.insert_link(&link(alias, 5_000 + i as i64), None).await.unwrap();
        }
        assert_eq!(complete_the_index(&store, &codes).await.unwrap(), 3);
        let mut want = vec!["my-alias".to_owned(), "promo".to_owned(), above.clone()];
        want.sort();
        assert_eq!(aliases(&store).await, want);
        assert!(store.read_setting(ALIAS_INDEX_SETTING).await.unwrap().is_some());

        // Once complete, nothing is read or recorded again.
        store.insert_link(&link("late", 9_000), None).await.unwrap();
        assert_eq!(complete_the_index(&store, &codes).await.unwrap(), 0);
        assert!(!aliases(&store).await.contains(&"late".to_owned()));
    }

    #[tokio::test]
    async fn a_new_store_is_complete_at_once() {
        let store = MemoryStore::new();
        assert_eq!(
            complete_the_index(&store, &GeneratedCodes::new([1; 16])).await.unwrap(),
            0
        );
        assert!(store.read_setting(ALIAS_INDEX_SETTING).await.unwrap().is_some());
    }
}
