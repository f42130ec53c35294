//! Values written either as a string or as a table of options (`listen` entries, upstream
//! servers). An untagged enum would accept both but, for a table with a key it does not
//! know, only say that nothing matched (or, without `deny_unknown_fields`, drop the key);
//! this names the key, as every other table does.

use std::marker::PhantomData;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

/// Deserialize `"text"` with `text`, or a table of `T`'s keys with `table`.
pub(crate) fn string_or_table<'de, D, T, O>(
    d: D,
    expecting: &'static str,
    text: fn(&str) -> O,
    table: fn(T) -> O,
) -> Result<O, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Visit<T, O> {
        expecting: &'static str,
        text: fn(&str) -> O,
        table: fn(T) -> O,
        _t: PhantomData<T>,
    }
    impl<'de, T: Deserialize<'de>, O> Visitor<'de> for Visit<T, O> {
        type Value = O;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.expecting)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<O, E> {
            Ok((self.text)(v))
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<O, A::Error> {
            T::deserialize(de::value::MapAccessDeserializer::new(map)).map(self.table)
        }
    }
    d.deserialize_any(Visit {
        expecting,
        text,
        table,
        _t: PhantomData,
    })
}
