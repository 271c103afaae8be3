//! Where a store in an S3-compatible bucket lives: its `s3://BUCKET/PREFIX` URL and its `AWS_*`
//! settings. Compiled into every build, so that the command line parses `--storage` (and says
//! what to do) even where the S3 backend itself ([`crate::s3`], feature `s3`) is left out.

/// How far back each poll of the shard log looks before the newest entry it saw: entries are
/// named by their writer's clock when the shard was accepted, so one that arrives late (a slow
/// PUT, a node whose clock is behind) is still found if it is less than this late.
pub const LOG_WINDOW_MS: u64 = 120_000;

/// `s3://BUCKET/PREFIX`: where an S3 backend keeps a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageUrl {
    pub bucket: String,
    /// Without leading or trailing slashes; empty for the bucket's root.
    pub prefix: String,
}

impl std::str::FromStr for StorageUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let rest = s.strip_prefix("s3://").ok_or_else(|| {
            format!(
                "{s:?} is not an s3://BUCKET/PREFIX URL (other object stores are not supported)"
            )
        })?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !valid_bucket {
            return Err(format!(
                "{s:?}: {bucket:?} is not a bucket name (3 to 63 lowercase letters, digits, '-' or '.')"
            ));
        }
        let prefix = prefix.trim_matches('/');
        if prefix
            .split('/')
            .any(|p| p.is_empty() || p == "." || p == "..")
            && !prefix.is_empty()
        {
            return Err(format!("{s:?}: the prefix has an empty, '.' or '..' part"));
        }
        Ok(Self {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        })
    }
}

impl std::fmt::Display for StorageUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.prefix.is_empty() {
            write!(f, "s3://{}", self.bucket)
        } else {
            write!(f, "s3://{}/{}", self.bucket, self.prefix)
        }
    }
}

/// Where a store's bucket is and how to reach it: the URL, and its `AWS_*` settings (by the
/// names of the environment variables; the command line takes them from the environment,
/// tests running several servers in one process give each its own).
#[derive(Clone, PartialEq, Eq)]
pub struct S3Config {
    pub url: StorageUrl,
    /// `(AWS_… name, value)`; a name given twice: the last value.
    pub settings: Vec<(String, String)>,
}

impl S3Config {
    /// The bucket of `url`, reached with the `AWS_*` settings among `vars` (the command line
    /// passes the environment's): those `object_store` knows, as its own builder would take
    /// them from the environment; any other variable is left out.
    pub fn from_vars(url: StorageUrl, vars: impl IntoIterator<Item = (String, String)>) -> Self {
        let settings = vars
            .into_iter()
            .filter(|(name, _)| {
                name == Self::ENDPOINTS || (name.starts_with("AWS_") && known_setting(name))
            })
            .collect();
        Self { url, settings }
    }

    /// git-xet's own setting: several endpoints of one object store (the Garage nodes of a
    /// cluster, say), separated by commas; requests go to the first that answers, and one that
    /// fails is tried again after the others for 30 s. Takes the place of `AWS_ENDPOINT`.
    pub const ENDPOINTS: &'static str = "GIT_XET_S3_ENDPOINTS";

    /// The settings that name endpoints ([`Self::endpoints`]), not passed on to the client as
    /// they are.
    pub const ENDPOINT_SETTINGS: [&'static str; 3] =
        [Self::ENDPOINTS, "AWS_ENDPOINT", "AWS_ENDPOINT_URL"];

    /// The endpoints to reach the store at, in order: those of [`Self::ENDPOINTS`], else
    /// `AWS_ENDPOINT` (or `AWS_ENDPOINT_URL`); none: the provider's default (Amazon S3).
    pub fn endpoints(&self) -> Vec<String> {
        if let Some(list) = self.setting(Self::ENDPOINTS) {
            let listed: Vec<String> = list
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_owned)
                .collect();
            if !listed.is_empty() {
                return listed;
            }
        }
        self.setting("AWS_ENDPOINT")
            .or_else(|| self.setting("AWS_ENDPOINT_URL"))
            .into_iter()
            .collect()
    }

    /// The value of setting `name`, the last one given.
    pub(crate) fn setting(&self, name: &str) -> Option<String> {
        self.settings
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
}

impl std::fmt::Debug for S3Config {
    // The settings hold keys: only their names are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.settings.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("S3Config")
            .field("url", &self.url)
            .field("settings", &names)
            .finish()
    }
}

/// Whether `name` is an `AWS_*` setting the S3 client knows.
#[cfg(feature = "s3")]
fn known_setting(name: &str) -> bool {
    name.to_ascii_lowercase()
        .parse::<object_store::aws::AmazonS3ConfigKey>()
        .is_ok()
}

/// Without the S3 backend no setting is used: all are kept, none is read.
#[cfg(not(feature = "s3"))]
fn known_setting(_name: &str) -> bool {
    true
}
