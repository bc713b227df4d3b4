//! Read: input objects decoded into one Arrow table per partition date.
//!
//! Formats: Parquet (row groups decoded in parallel, and skipped by their statistics when no
//! row of a wanted date can be in them), CSV and NDJSON, plain or gzip / zstd compressed.
//! Every object is read by column name; the objects of one date are unified to one record
//! schema by a written rule ([`unify`]) before prepare. Every row keeps where it came from —
//! object, row number and, in text, line — so later stages can name the exact place of bad
//! input. A row whose partition date is null, unparseable, or disagrees with the `col=date/`
//! folder it lies in is bad input.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use chrono::NaiveDate;
use futures::StreamExt;
use object_store::{ObjectMeta, ObjectStoreExt};

use crate::error::{InputError, Location, PartitionError};
use crate::store::StoreLocation;

mod decode;
pub mod list;
mod ranged;
mod table;
pub mod text;
pub mod unify;
pub use decode::{
    footer_schema, in_name_order, parquet_footer, row_group_dates, rows_bytes, tombstone_missing, DateSource, Decoded,
    Decoder, FooterError, Parts, Stored, Tombstone, PIECE,
};
pub use table::{split_id, IdCmp, ObjectRows, Piece, Table, CHUNK_BITS, CHUNK_ROWS};
pub use text::{parse_type, per_second, Declared};

/// The format of input objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Parquet,
    Csv,
    Ndjson,
}

/// The rows of one date's pieces as one table: their schemas unified by the written rule
/// ([`unify`]), every piece conformed to it by column name, exactly.
pub fn assemble(pieces: Vec<Piece>, decoder: &Decoder) -> Result<Table, InputError> {
    let schemas: Vec<(&str, SchemaRef)> = pieces.iter().map(|p| (p.object.as_ref(), p.batch.schema())).collect();
    let refs: Vec<(&str, &arrow::datatypes::Schema)> = schemas.iter().map(|(o, s)| (*o, s.as_ref())).collect();
    let schema = unified(&refs, decoder)?;
    drop(schemas);
    let version = decoder.version.as_deref();
    let conformed =
        pieces.into_iter().map(|p| conform(p, &schema, decoder.tz, version)).collect::<Result<Vec<_>, _>>()?;
    Table::from_pieces(schema, conformed)
}

/// The schema the objects' schemas unify to (the written rule of [`unify`]): declared types
/// first, and a column with no value in any of them in the run's type.
pub fn unified(schemas: &[(&str, &arrow::datatypes::Schema)], decoder: &Decoder) -> Result<SchemaRef, InputError> {
    let schema = unify::unify(schemas, &|c| decoder.column_type(c), &|c| decoder.run_type(c)).map_err(|c| {
        let objects = format!("{} and {}", c.types[0].1, c.types[1].1);
        InputError::bad(
            Location { object: objects, row: None, line: None, column: Some(c.column.clone()) },
            c.to_string(),
        )
    })?;
    match same_but_for_case(&schema) {
        None => Ok(schema),
        Some((a, b)) => {
            let first = |name: &str| {
                schemas.iter().find(|(_, s)| s.field_with_name(name).is_ok()).map_or("", |(o, _)| *o).to_string()
            };
            let (oa, ob) = (first(a), first(b));
            let objects = if oa == ob { oa.clone() } else { format!("{oa} and {ob}") };
            Err(InputError::bad(
                Location { object: objects, row: None, line: None, column: Some(b.to_string()) },
                format!(
                    "columns `{a}` (in {oa}) and `{b}` (in {ob}) differ only by case: SQL reads an unquoted name \
                     as one of them and leaves the other's values out, and DuckDB and Spark take them for one \
                     column. A field its producer renamed, most likely: fix the writer, or give them names apart"
                ),
            ))
        }
    }
}

/// Two columns of `schema` whose names differ only by case (`amount`, `Amount`).
fn same_but_for_case(schema: &arrow::datatypes::Schema) -> Option<(&str, &str)> {
    let mut seen: std::collections::HashMap<String, &str> = std::collections::HashMap::new();
    schema.fields().iter().find_map(|f| {
        let name = f.name().as_str();
        match seen.insert(name.to_lowercase(), name) {
            Some(before) if before != name => Some((before, name)),
            _ => None,
        }
    })
}

/// A piece conformed to `schema` by column name, exactly; a value that does not fit names its
/// object, row and column. A wall-clock `version` that the zone repeats does not become an
/// instant ([`unify::repeated_wall_clock`]).
pub fn conform(p: Piece, schema: &SchemaRef, tz: chrono_tz::Tz, version: Option<&str>) -> Result<Piece, InputError> {
    let batch = unify::conform(&p.batch, schema, tz).and_then(|b| {
        let Some(v) = version else { return Ok(b) };
        let (Some(from), Some(to)) = (p.batch.column_by_name(v), b.column_by_name(v)) else { return Ok(b) };
        match unify::repeated_wall_clock(from, to, tz) {
            Some(r) => {
                Err((v.to_string(), unify::Inexact { row: Some(r), message: unify::repeated_version(from, r, tz) }))
            }
            None => Ok(b),
        }
    });
    let batch = batch.map_err(|(column, e)| {
        let i = e.row.unwrap_or(0);
        InputError::bad(
            Location {
                object: p.object.to_string(),
                row: e.row.and_then(|r| p.object_rows.get(r)),
                line: p.lines.as_ref().and_then(|l| l.get(i).copied()).filter(|_| e.row.is_some()),
                column: Some(column),
            },
            e.message,
        )
    })?;
    Ok(Piece { batch, ..p })
}

/// Fetches objects (a few at a time) and decodes them in parallel; the results in the
/// objects' order. An object that cannot be fetched or decoded is an error for every date it
/// serves.
pub async fn read_objects(
    input: &StoreLocation,
    decoder: &Decoder,
    objects: &[ObjectMeta],
    dates: &[NaiveDate],
    path_date: Option<NaiveDate>,
) -> Vec<Result<Decoded, InputError>> {
    decoded(input, decoder, objects, dates, path_date, 4, None).collect().await
}

/// Fetches and decodes objects, `ahead` at a time, yielding them in the objects' order; each
/// counted by `meter`, when there is one ([`Decoder::decode_within`]).
pub fn decoded<'a>(
    input: &'a StoreLocation,
    decoder: &'a Decoder,
    objects: &'a [ObjectMeta],
    dates: &[NaiveDate],
    path_date: Option<NaiveDate>,
    ahead: usize,
    meter: Option<Arc<crate::spill::Meter>>,
) -> impl futures::Stream<Item = Result<Decoded, InputError>> + 'a {
    let wanted: Arc<[NaiveDate]> = Arc::from(dates);
    futures::stream::iter(objects.iter().cloned())
        .map(move |m| {
            let decoder = decoder.clone();
            let wanted = wanted.clone();
            let meter = meter.clone();
            async move {
                let name = input.display(&m.location);
                let unreadable =
                    |e: object_store::Error| InputError::unreadable(Location::object(name.clone()), e.to_string());
                let bytes =
                    input.store.get(&m.location).await.map_err(unreadable)?.bytes().await.map_err(unreadable)?;
                let task = name.clone();
                tokio::task::spawn_blocking(move || {
                    decoder.decode_within(&task, bytes, &wanted, path_date, meter.as_deref())
                })
                .await
                .map_err(|e| InputError::unreadable(Location::object(name), format!("decoding task failed: {e}")))?
            }
        })
        .buffered(ahead.max(1))
}

/// The record schema of an NDJSON object too large to fetch whole (past [`decode::PIECE`]):
/// read from its store as pieces of lines ([`Decoder::json_schema`]), on a thread of its own
/// (its reads wait on the runtime). Dropped before it answers, its thread makes no further
/// read (the read under way, and the parsing of its piece, finish first).
pub async fn streamed_schema(
    input: &StoreLocation,
    decoder: &Decoder,
    m: &ObjectMeta,
) -> Result<SchemaRef, InputError> {
    let name = input.display(&m.location);
    let abandoned = ranged::Abandoned::default();
    let runtime = tokio::runtime::Handle::current();
    let stored = Stored::Ranged(ranged::Ranged::until(input.store.clone(), m, runtime, abandoned.clone()));
    let (decoder, object) = (decoder.clone(), name.clone());
    on_own_thread(Some(abandoned), move || decoder.json_schema(&object, &stored)).await.unwrap_or_else(|why| {
        Err(InputError::unreadable(Location::object(name), format!("decoding task failed: {why}")))
    })
}

/// Runs `work` on a thread of its own, not one of the runtime's: work that waits on the
/// runtime (ranged reads; a local folder's read is a blocking task itself) or on a consumer.
/// Its result, or why there is none: the thread could not start, or `work` panicked. When the
/// caller's future is dropped first, `abandoned` (if given) is set: reads made
/// [`ranged::Ranged::until`] it then fail, and `work` ends at its next read.
async fn on_own_thread<T: Send + 'static>(
    abandoned: Option<ranged::Abandoned>,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    struct SetOnDrop(Option<ranged::Abandoned>);
    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            if let Some(a) = &self.0 {
                a.set();
            }
        }
    }
    let _gone = SetOnDrop(abandoned);
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("lakeswap-decode".into())
        .spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            let _ = tx.send(r.map_err(|p| crate::error::panic_message(p.as_ref())));
        })
        .map_err(|e| format!("cannot start a decoding thread: {e}"))?;
    match rx.await {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(panic)) => Err(format!("the decoder panicked: {panic}")),
        Err(_) => Err("the decoder stopped without an answer".into()),
    }
}

/// Fetches and decodes objects a part at a time ([`Decoder::decode_parts`]), in the objects'
/// order: each part, or an object's error, with the index of its object. Parts are cut as
/// `parts` says. The next object is fetched while one is decoded, and a part is decoded while
/// the consumer works on the last one. An object within a part's bytes is fetched whole; a
/// larger Parquet object a row group at a time, a larger NDJSON object a piece of lines at a
/// time (CSV objects are fetched whole). Memory then holds about two such objects' or row
/// groups' stored bytes and a few parts. A decoder
/// that dies ends the stream with an error, never silently.
pub fn decoded_parts(
    input: StoreLocation,
    decoder: Decoder,
    objects: Vec<ObjectMeta>,
    dates: Vec<NaiveDate>,
    path_date: Option<NaiveDate>,
    parts: decode::Parts,
) -> impl futures::Stream<Item = (usize, Result<Decoded, InputError>)> {
    type Item = (usize, Result<Decoded, InputError>);
    let (tx, rx) = tokio::sync::mpsc::channel::<Item>(1);
    let producer = tokio::spawn(async move {
        // Each fetch is a task of its own, so it goes on while the previous object decodes.
        let fetches = futures::stream::iter(objects)
            .map(|m| {
                let (input, decoder) = (input.clone(), decoder.clone());
                tokio::spawn(async move {
                    let name = input.display(&m.location);
                    let unreadable =
                        |e: object_store::Error| InputError::unreadable(Location::object(name.clone()), e.to_string());
                    // A Parquet object past a part's bytes is read a row group at a time, an
                    // NDJSON object from start to end as pieces of lines.
                    let ranged = matches!(decoder.format, Format::Parquet | Format::Ndjson);
                    if ranged && parts.bytes.is_some_and(|b| m.size > b) {
                        let runtime = tokio::runtime::Handle::current();
                        let ranged = ranged::Ranged::new(input.store.clone(), &m, runtime);
                        return Ok((name, Stored::Ranged(ranged)));
                    }
                    let got = input.store.get(&m.location).await.map_err(unreadable)?;
                    Ok::<_, InputError>((name.clone(), Stored::Whole(got.bytes().await.map_err(unreadable)?)))
                })
            })
            .buffered(2);
        let mut fetches = std::pin::pin!(fetches.enumerate());
        while let Some((k, fetched)) = fetches.next().await {
            let fetched = fetched.unwrap_or_else(|e| {
                Err(InputError::unreadable(Location::object(format!("object {k}")), format!("fetch task failed: {e}")))
            });
            let (name, stored) = match fetched {
                Ok(f) => f,
                Err(e) => {
                    let _ = tx.send((k, Err(e))).await;
                    return;
                }
            };
            let (sender, decoder, dates) = (tx.clone(), decoder.clone(), dates.clone());
            let task = name.clone();
            // A thread of its own: it waits for the consumer and for its ranged reads, and
            // dates spilled at once must not take every blocking thread of the runtime waiting.
            let decode = move || {
                let mut gone = false;
                let r = decoder.decode_parts(&task, stored, &dates, path_date, parts, &mut |part| {
                    // The consumer has stopped: no need to decode the rest.
                    gone = sender.blocking_send((k, Ok(part))).is_err();
                    if gone {
                        Err(InputError::unreadable(Location::object(task.clone()), "the reader stopped"))
                    } else {
                        Ok(())
                    }
                });
                match r {
                    Err(_) if gone => false,
                    Err(e) => {
                        let _ = sender.blocking_send((k, Err(e)));
                        false
                    }
                    Ok(()) => true,
                }
            };
            let failed = match on_own_thread(None, decode).await {
                Ok(true) => None,
                Ok(false) => return,
                Err(why) => Some(why),
            };
            if let Some(why) = failed {
                let e = InputError::unreadable(Location::object(name), format!("decoding task failed: {why}"));
                let _ = tx.send((k, Err(e))).await;
                return;
            }
        }
    });
    // When the channel closes, the producer has finished, or failed: then say so.
    futures::stream::unfold((rx, Some(producer)), |(mut rx, producer)| async move {
        if let Some(item) = rx.recv().await {
            return Some((item, (rx, producer)));
        }
        match producer?.await {
            Ok(()) => None,
            Err(e) => {
                let e = InputError::unreadable(Location::object("the input"), format!("the reading task failed: {e}"));
                Some(((usize::MAX, Err(e)), (rx, None)))
            }
        }
    })
}

/// The rows of one date, read from objects that serve only it (a Hive folder): its table, or
/// why the date fails.
pub async fn read_date(
    input: &StoreLocation,
    decoder: &Decoder,
    objects: &[ObjectMeta],
    date: NaiveDate,
    path_date: Option<NaiveDate>,
) -> Result<Table, PartitionError> {
    read_date_within(input, decoder, objects, date, path_date, None).await
}

/// [`read_date`], its rows counted by `meter` as they are decoded. When the meter goes over
/// its budget, reading stops with an error: the caller asks the meter first.
pub async fn read_date_within(
    input: &StoreLocation,
    decoder: &Decoder,
    objects: &[ObjectMeta],
    date: NaiveDate,
    path_date: Option<NaiveDate>,
    meter: Option<Arc<crate::spill::Meter>>,
) -> Result<Table, PartitionError> {
    let mut pieces = Vec::new();
    let read: Vec<_> = decoded(input, decoder, objects, &[date], path_date, 4, meter).collect().await;
    for r in read {
        let mut d = r?;
        if let Some(e) = d.bad.remove(&date) {
            return Err(e.into());
        }
        pieces.append(&mut d.pieces);
    }
    Ok(assemble(pieces, decoder)?)
}

/// A flat input, read once for every wanted date: each object's rows split by date.
#[derive(Debug, Default)]
pub struct FlatInput {
    pub by_date: BTreeMap<NaiveDate, Vec<Piece>>,
    /// The first bad value of each date.
    pub bad: BTreeMap<NaiveDate, InputError>,
    /// Objects that could not be read at all, by location.
    pub failed: BTreeMap<String, InputError>,
}

impl FlatInput {
    /// The dates found.
    pub fn dates(&self) -> Vec<NaiveDate> {
        let mut d: Vec<NaiveDate> = self.by_date.keys().chain(self.bad.keys()).copied().collect();
        d.sort();
        d.dedup();
        d
    }

    /// The objects among `all` that hold rows of `date` (or a bad value of it).
    pub fn objects_of(&self, date: NaiveDate, all: &[ObjectMeta], input: &StoreLocation) -> Vec<ObjectMeta> {
        let mut names: std::collections::HashSet<&str> =
            self.by_date.get(&date).into_iter().flatten().map(|p| p.object.as_ref()).collect();
        if let Some(e) = self.bad.get(&date) {
            names.insert(e.location().object.as_str());
        }
        all.iter()
            .filter(|m| {
                names.contains(input.display(&m.location).as_str()) || self.failed.contains_key(m.location.as_ref())
            })
            .cloned()
            .collect()
    }

    /// The table of `date`, whose rows may lie in `objects`.
    pub fn table(&self, date: NaiveDate, objects: &[ObjectMeta], decoder: &Decoder) -> Result<Table, PartitionError> {
        if let Some(e) = objects.iter().find_map(|m| self.failed.get(m.location.as_ref())) {
            return Err(e.clone().into());
        }
        if let Some(e) = self.bad.get(&date) {
            return Err(e.clone().into());
        }
        let pieces = self.by_date.get(&date).cloned().unwrap_or_default();
        Ok(assemble(pieces, decoder)?)
    }
}

/// Reads every object of a flat input once, splitting its rows by date.
pub async fn read_flat(
    input: &StoreLocation,
    decoder: &Decoder,
    objects: &[ObjectMeta],
    dates: &[NaiveDate],
) -> FlatInput {
    let mut flat = FlatInput::default();
    for (m, r) in objects.iter().zip(read_objects(input, decoder, objects, dates, None).await) {
        match r {
            Err(e) => {
                flat.failed.insert(m.location.to_string(), e);
            }
            Ok(d) => {
                for (date, e) in d.bad {
                    flat.bad.entry(date).or_insert(e);
                }
                for p in d.pieces {
                    flat.by_date.entry(p.date).or_default().push(p);
                }
            }
        }
    }
    flat
}
