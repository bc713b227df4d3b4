//! The stores a job-level test can run on: in-memory, a local folder, a real S3-compatible
//! server (SeaweedFS) and Azurite. The server backends need the variables `scripts/test` sets
//! after starting the servers; without them a server test fails, it never passes silently.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures::TryStreamExt;
use lakeswap::store::{self, StoreLocation};
use object_store::ObjectStoreExt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Memory,
    Local,
    S3,
    Azure,
}

/// A fresh, empty place on one backend: `<root>/in` and `<root>/out`.
/// The run state of [`Backend::job`]'s output `out`.
pub const STATE: &str = "_lakeswap/out";

pub struct Backend {
    pub kind: Kind,
    root: String,
    _dir: Option<tempfile::TempDir>,
}

fn unique() -> String {
    format!("t{:016x}", rand::random::<u64>())
}

fn need(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: the server suites need the servers that scripts/test starts (see README)")
    })
}

impl Backend {
    pub fn new(kind: Kind) -> Backend {
        match kind {
            Kind::Memory => Backend { kind, root: format!("memory://{}/lake", unique()), _dir: None },
            Kind::Local => {
                let dir = tempfile::tempdir().unwrap();
                Backend { kind, root: dir.path().display().to_string(), _dir: Some(dir) }
            }
            Kind::S3 => {
                need("LAKESWAP_TEST_S3");
                need("AWS_ENDPOINT_URL");
                Backend { kind, root: format!("s3://{}/{}", need("LAKESWAP_TEST_S3_BUCKET"), unique()), _dir: None }
            }
            Kind::Azure => {
                need("LAKESWAP_TEST_AZURE");
                need("AZURITE_BLOB_STORAGE_URL");
                Backend {
                    kind,
                    root: format!("az://{}/{}", need("LAKESWAP_TEST_AZURE_CONTAINER"), unique()),
                    _dir: None,
                }
            }
        }
    }

    pub fn url(&self, sub: &str) -> String {
        format!("{}/{sub}", self.root)
    }

    pub fn location(&self, sub: &str) -> StoreLocation {
        if self.kind == Kind::Local {
            std::fs::create_dir_all(self.url(sub)).unwrap();
        }
        store::open(&self.url(sub), &Default::default(), "test", true).unwrap()
    }

    pub async fn put(&self, sub: &str, path: &str, bytes: Vec<u8>) {
        let loc = self.location(sub);
        loc.store.put(&loc.child(&[path]), Bytes::from(bytes).into()).await.unwrap();
    }

    pub async fn get(&self, sub: &str, path: &str) -> Option<Vec<u8>> {
        let loc = self.location(sub);
        match loc.store.get(&loc.child(&[path])).await {
            Ok(r) => Some(r.bytes().await.unwrap().to_vec()),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => panic!("get {path}: {e}"),
        }
    }

    pub async fn delete(&self, sub: &str, path: &str) {
        let loc = self.location(sub);
        let _ = loc.store.delete(&loc.child(&[path])).await;
    }

    /// Every object under `sub`, relative path to bytes.
    pub async fn objects(&self, sub: &str) -> BTreeMap<String, Vec<u8>> {
        let loc = self.location(sub);
        let metas: Vec<_> = loc.store.list(Some(&loc.prefix)).try_collect().await.unwrap();
        let mut out = BTreeMap::new();
        for m in metas {
            let b = loc.store.get(&m.location).await.unwrap().bytes().await.unwrap();
            out.insert(loc.relative(&m.location), b.to_vec());
        }
        out
    }

    /// The committed partitions under `out`: `event_date=D/part-00000.parquet` to bytes.
    pub async fn partitions(&self) -> BTreeMap<String, Vec<u8>> {
        self.partitions_at("out").await
    }

    /// The committed partitions under `sub`.
    pub async fn partitions_at(&self, sub: &str) -> BTreeMap<String, Vec<u8>> {
        self.objects(sub).await.into_iter().filter(|(k, _)| !k.starts_with('_')).collect()
    }

    /// Writes rows as Hive-partitioned Parquet under `in`, `files` objects per date.
    pub async fn write_input(&self, rows: &[super::Order], files: usize) {
        for (rel, b) in super::hive_parts(rows, files) {
            self.put("in", &rel, super::parquet_bytes(&b)).await;
        }
    }

    /// The standard revenue job on this backend.
    /// The run state of the job writing to `out_sub` (the default `state_url`, beside it).
    pub fn state_of(out_sub: &str) -> String {
        format!("_lakeswap/{out_sub}")
    }

    pub fn job(&self) -> lakeswap::Job {
        self.job_at("out")
    }

    /// The standard revenue job, writing to `out_sub`.
    pub fn job_at(&self, out_sub: &str) -> lakeswap::Job {
        let text = format!(
            "[job]\nname = \"revenue_daily\"\nkind = \"aggregate\"\n\n[input]\nurl = \"{}\"\nformat = \"parquet\"\n\n\
             [identity]\nkey = [\"order_id\"]\nversion = \"source_version\"\n{}\n[output]\nurl = \"{}\"\n",
            self.url("in"),
            super::MEASURES,
            self.url(out_sub)
        );
        if self.kind == Kind::Local {
            std::fs::create_dir_all(self.url("in")).unwrap();
        }
        let cfg = lakeswap::JobConfig::parse(&text, "test.toml").unwrap();
        lakeswap::Job::from_config(cfg, "test.toml").unwrap()
    }
}
