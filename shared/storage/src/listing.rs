//! A container's blobs, one page of List Blobs (flat) at a time, in memory a
//! caller can count before it asks.
//!
//! A page's answer is read into one buffer of at most its `PageSize`'s answer
//! cap (`ANSWER_BYTES_PER_NAME` per name asked for, more with metadata): an
//! answer that would be larger (names of 1,024 escaped characters, properties
//! of kilobytes) is dropped unread past the cap and asked again for a quarter
//! of the names, down to one, so a page never holds more than
//! `PageSize::bytes` whatever the blobs are called. The answer is parsed with
//! the SDK's models of a name (percent-encoded names decoded) and of the
//! properties, then kept as `ListedBlob`s.
//!
//! A lister made `with_seals` also asks for each blob's metadata
//! (`include=metadata`) and keeps only the relay's SHA-256 and seal from it:
//! the model names those two keys and skips every other, so a blob with
//! thousands of tiny metadata pairs (anyone who may write storage can set
//! them) costs the parse no map of them. Whether the seal holds is the
//! caller's to check (`ListedBlob::sealed_sha256`): only it has the key.
//!
//! Names outside the prefix asked for are dropped: a listing taken up from
//! a marker a caller handed back (opaque to the reader, so possibly forged)
//! still yields only what the prefix selects.

use azure_core::error::ErrorKind;
use azure_core::http::{Method, Request};
use azure_storage_blob::models::{BlobName, BlobProperties};
use relay_proto::id_key::IdKey;
use serde::Deserialize;

use crate::blob::BlobWriter;
use crate::read::{ReadError, header_etag};

/// Names a page asks storage for unless the caller says otherwise.
pub const DEFAULT_PAGE_NAMES: u32 = 1000;

/// Azure's most names a page.
pub const MAX_PAGE_NAMES: u32 = 5000;

/// Bytes of storage's answer allowed per name asked for: Azure writes about
/// 1 KB of XML per blob with its properties, plus the name (at most 1,024
/// characters, escaped).
pub const ANSWER_BYTES_PER_NAME: u64 = 4 << 10;

/// What parsing adds per name beyond the answer's bytes: the SDK's model of
/// one blob (a struct of some 40 optional fields) and the page's entry.
/// `tests/listing_memory.rs` measures the peak of a page's parse against
/// `PageSize::bytes`.
pub const ENTRY_BYTES: u64 = 3 << 10;

/// Bytes of storage's answer allowed per name beyond `ANSWER_BYTES_PER_NAME`
/// when the page asks for metadata: the relay's SHA-256, seal and writer's
/// mark take some 250 bytes of XML, and a user's own metadata the rest.
pub const METADATA_BYTES_PER_NAME: u64 = 2 << 10;

/// The smallest answer cap of a page that asks for metadata: one blob with
/// the longest name (1,024 characters, six bytes each escaped), its
/// properties, and the most metadata storage keeps (8 KiB of names and
/// values, each byte at most six escaped, a name written twice as its
/// element's tags), so even a page shrunk to one name reads any blob.
pub const ONE_BLOB_WITH_METADATA_BYTES: u64 = 128 << 10;

/// One page's size: the names asked for, whether with metadata, and so the
/// memory it may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageSize {
    pub names: u32,
    /// The page asks for each blob's metadata (`Lister::with_seals`).
    pub metadata: bool,
}

impl PageSize {
    /// A page of `names` without metadata.
    pub fn plain(names: u32) -> Self {
        Self {
            names,
            metadata: false,
        }
    }

    /// Answer bytes allowed per name asked for.
    fn per_name(metadata: bool) -> u64 {
        ANSWER_BYTES_PER_NAME + if metadata { METADATA_BYTES_PER_NAME } else { 0 }
    }

    /// Largest answer read for a page of this size.
    pub fn answer_cap(&self) -> u64 {
        let cap = u64::from(self.names.max(1)) * Self::per_name(self.metadata);
        if self.metadata {
            cap.max(ONE_BLOB_WITH_METADATA_BYTES)
        } else {
            cap
        }
    }

    /// The most memory one page holds at once: its answer (at most the cap),
    /// the model parsed from it (its strings no longer than the answer) and
    /// the entries kept.
    pub fn bytes(&self) -> u64 {
        2 * self.answer_cap() + u64::from(self.names.max(1)) * ENTRY_BYTES
    }

    /// The page of at most `names` (1 to `MAX_PAGE_NAMES`) whose memory is
    /// at most `bytes`: fewer names when memory is tight, never fewer than one.
    /// (With metadata, a page of one name still takes
    /// `ONE_BLOB_WITH_METADATA_BYTES` for its answer: the least that reads
    /// any blob.)
    pub fn within(names: u32, bytes: u64, metadata: bool) -> PageSize {
        let names = names.clamp(1, MAX_PAGE_NAMES);
        let per_name = 2 * Self::per_name(metadata) + ENTRY_BYTES;
        let fit = u32::try_from(bytes / per_name).unwrap_or(u32::MAX);
        PageSize {
            names: names.min(fit).max(1),
            metadata,
        }
    }
}

/// One blob of a listing page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedBlob {
    pub name: String,
    pub size: u64,
    pub etag: String,
    pub last_modified: Option<u64>,
    /// From a page with metadata: the relay's SHA-256 and seal as found
    /// (not yet checked; `sealed_sha256` checks them).
    pub sha256: Option<String>,
    pub seal: Option<String>,
}

impl ListedBlob {
    /// The SHA-256 (hex, lower case) the relay vouches for: the one in
    /// metadata, only if the seal over it, this blob's name and size
    /// verifies under `key` (the one check, `publish::seal_holds`).
    pub fn sealed_sha256(&self, key: &IdKey, container: &str) -> Option<String> {
        let sha = self.sha256.as_deref()?;
        let seal = self.seal.as_deref()?;
        crate::publish::seal_holds(key, container, &self.name, self.size, sha, seal)
            .then(|| sha.to_ascii_lowercase())
    }
}

/// One page of a listing and where the next starts (`None`: the last page).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage {
    pub blobs: Vec<ListedBlob>,
    pub next_marker: Option<String>,
}

/// What one List Blobs request brought.
enum Answer {
    Page(ListPage),
    /// Larger than the cap: not read past it.
    TooLarge,
}

/// Lists one container's blobs a page at a time.
pub struct Lister {
    /// A writer at the container's URL: its retry schedule and counters.
    pub(crate) w: BlobWriter,
    /// Ask for each blob's metadata (the relay's seal).
    pub(crate) metadata: bool,
}

impl Lister {
    pub fn requests(&self) -> u32 {
        self.w.requests()
    }

    /// This lister, asking for each blob's SHA-256 and seal (`include=metadata`):
    /// larger answers, so its pages are `PageSize { metadata: true }`.
    pub fn with_seals(mut self) -> Self {
        self.metadata = true;
        self
    }

    /// The page of at most `names` blobs under `prefix` from `marker`, within
    /// `PageSize { names }.bytes()` of memory.
    pub async fn page(
        &self,
        prefix: &str,
        marker: Option<&str>,
        names: u32,
    ) -> Result<ListPage, ReadError> {
        let size = PageSize {
            names: names.clamp(1, MAX_PAGE_NAMES),
            metadata: self.metadata,
        };
        let cap = size.answer_cap();
        let mut ask = size.names;
        loop {
            match self.request(prefix, marker, ask, cap).await? {
                Answer::Page(page) => return Ok(page),
                Answer::TooLarge if ask > 1 => ask = (ask / 4).max(1),
                Answer::TooLarge => return Err(ReadError::AnswerTooLarge(cap)),
            }
        }
    }

    /// Whether the container is there (Get Container Properties, no body):
    /// `ReadError::NotFound` when it is not. One request with no per-blob
    /// work, so a listing can be answered for before storage has sorted and
    /// written out its first page.
    pub async fn container_exists(&self) -> Result<(), ReadError> {
        let mut url = self.w.url.clone();
        url.query_pairs_mut().append_pair("restype", "container");
        let version = self.w.account.version.clone();
        self.w
            .with_retry(
                "Get Container Properties",
                false,
                std::time::Duration::ZERO,
                || {
                    let mut r = Request::new(url.clone(), Method::Get);
                    r.insert_header("x-ms-version", version.clone());
                    // Nothing to read: the answer's status said enough.
                    async move { self.w.answer(&mut r, &[200]).await.map(drop) }
                },
            )
            .await?;
        Ok(())
    }

    /// One List Blobs request for `names`, its answer read up to `cap` bytes.
    async fn request(
        &self,
        prefix: &str,
        marker: Option<&str>,
        names: u32,
        cap: u64,
    ) -> Result<Answer, ReadError> {
        let mut url = self.w.url.clone();
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("restype", "container")
                .append_pair("comp", "list")
                .append_pair("maxresults", &names.to_string());
            if !prefix.is_empty() {
                q.append_pair("prefix", prefix);
            }
            if let Some(m) = marker.filter(|m| !m.is_empty()) {
                q.append_pair("marker", m);
            }
            if self.metadata {
                q.append_pair("include", "metadata");
            }
        }
        let version = self.w.account.version.clone();
        let answer = self
            .w
            .with_retry("List Blobs", false, std::time::Duration::ZERO, || {
                let mut r = Request::new(url.clone(), Method::Get);
                r.insert_header("accept", "application/xml");
                r.insert_header("x-ms-version", version.clone());
                async move {
                    let resp = self.w.answer(&mut r, &[200]).await?;
                    let Some(body) = crate::read::collect_at_most(resp.into_body(), cap).await?
                    else {
                        return Ok(Answer::TooLarge);
                    };
                    parse_page(&body, prefix).map(Answer::Page).map_err(|why| {
                        azure_core::Error::with_message(ErrorKind::DataConversion, why)
                    })
                }
            })
            .await?;
        Ok(answer)
    }
}

/// A List Blobs answer as the parse needs it: the SDK's own models of a
/// name and of the properties, and of the metadata only the relay's two keys.
#[derive(Deserialize)]
#[serde(rename = "EnumerationResults")]
struct Answered {
    #[serde(rename = "Blobs", default)]
    blobs: Blobs,
    #[serde(rename = "NextMarker", default)]
    next_marker: Option<String>,
}

#[derive(Deserialize, Default)]
struct Blobs {
    #[serde(rename = "Blob", default)]
    items: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    #[serde(rename = "Name", default)]
    name: Option<BlobName>,
    #[serde(rename = "Properties", default)]
    properties: Option<BlobProperties>,
    #[serde(rename = "Metadata", default)]
    metadata: Option<Seal>,
}

/// The relay's two metadata keys (`blob_name::SHA256_METADATA_KEY`,
/// `id_key::SEAL_METADATA_KEY`); every other key is skipped unkept.
#[derive(Deserialize, Default)]
struct Seal {
    #[serde(default)]
    sha256: Option<String>,
    #[serde(default)]
    relay_seal: Option<String>,
}

/// A `<Name>` as the blob's name: percent-decoded when storage says it
/// encoded it (a name with characters XML cannot hold).
fn decoded(name: BlobName) -> Option<String> {
    let content = name.content?;
    if name.encoded.unwrap_or_default() {
        percent_encoding::percent_decode_str(&content)
            .decode_utf8()
            .ok()
            .map(|n| n.into_owned())
    } else {
        Some(content)
    }
}

/// A List Blobs answer as a page: the blobs whose names start with `prefix`
/// (others dropped), each ETag in the headers' form, the relay's SHA-256
/// and seal when the answer has metadata, and the next marker.
pub fn parse_page(answer: &[u8], prefix: &str) -> Result<ListPage, String> {
    let xml = answer.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(answer);
    // Not `azure_core::xml::from_xml`: its error quotes the whole answer.
    let list: Answered = quick_xml::de::from_reader(xml)
        .map_err(|e| format!("storage's List Blobs answer is not a listing: {e}"))?;
    let blobs = list
        .blobs
        .items
        .into_iter()
        .filter_map(|item| {
            let props = item.properties?;
            let name = item
                .name
                .and_then(decoded)
                .filter(|n| n.starts_with(prefix))?;
            let seal = item.metadata.unwrap_or_default();
            Some(ListedBlob {
                name,
                size: props.content_length.unwrap_or(0),
                etag: props
                    .etag
                    .map(|e| header_etag(e.as_ref()))
                    .unwrap_or_default(),
                last_modified: props
                    .last_modified
                    .and_then(|t| u64::try_from(t.unix_timestamp()).ok()),
                sha256: seal.sha256,
                seal: seal.relay_seal,
            })
        })
        .collect();
    Ok(ListPage {
        blobs,
        next_marker: list.next_marker.filter(|m| !m.is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(name: &str) -> String {
        format!(
            "<Blob><Name>{name}</Name><Properties><Last-Modified>Wed, 01 Jan 2025 00:00:00 GMT</Last-Modified><Etag>0x8DC0FFEE</Etag><Content-Length>12</Content-Length><BlobType>BlockBlob</BlobType></Properties></Blob>"
        )
    }

    fn answer(names: &[&str], next: Option<&str>) -> Vec<u8> {
        let blobs: String = names.iter().map(|n| blob(n)).collect();
        let next = next.map_or(String::new(), |m| format!("<NextMarker>{m}</NextMarker>"));
        format!(
            "\u{feff}<?xml version=\"1.0\" encoding=\"utf-8\"?><EnumerationResults ServiceEndpoint=\"http://x/\" ContainerName=\"c\"><Blobs>{blobs}</Blobs>{next}</EnumerationResults>"
        )
        .into_bytes()
    }

    #[test]
    fn a_page_keeps_only_the_names_under_its_prefix() {
        let a = answer(&["p/a", "p/&#x1F600;", "q/x", "p"], Some("2!opaque"));
        let page = parse_page(&a, "p/").expect("parse");
        let names: Vec<&str> = page.blobs.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["p/a", "p/\u{1F600}"]);
        assert_eq!(page.blobs[0].etag, "\"0x8DC0FFEE\"");
        assert_eq!(page.blobs[0].size, 12);
        assert_eq!(page.blobs[0].last_modified, Some(1_735_689_600));
        assert_eq!(page.next_marker.as_deref(), Some("2!opaque"));
        let last = parse_page(&answer(&["p/a"], None), "").expect("parse");
        assert_eq!(last.next_marker, None);
        // An answer cut short is no listing.
        let cut = answer(&["p/a", "p/b"], None);
        assert!(parse_page(&cut[..cut.len() / 2], "").is_err());
    }

    #[test]
    fn pages_shrink_to_fit_the_memory_they_are_given() {
        let full = PageSize::plain(DEFAULT_PAGE_NAMES);
        assert_eq!(full.answer_cap(), 4000 << 10);
        assert_eq!(full.bytes(), 2 * (4000 << 10) + 1000 * (3 << 10));
        let within = |n, b| PageSize::within(n, b, false);
        assert_eq!(within(DEFAULT_PAGE_NAMES, full.bytes()), full);
        assert_eq!(within(DEFAULT_PAGE_NAMES, u64::MAX), full);
        assert_eq!(within(9000, u64::MAX).names, MAX_PAGE_NAMES);
        let half = within(DEFAULT_PAGE_NAMES, full.bytes() / 2);
        assert_eq!(half.names, 500);
        assert!(half.bytes() <= full.bytes() / 2);
        assert_eq!(within(DEFAULT_PAGE_NAMES, 0).names, 1);
        assert_eq!(within(0, u64::MAX).names, 1);
    }

    /// Metadata makes each name's allowance larger, and a page of one name
    /// still reads the largest blob storage can describe.
    #[test]
    fn pages_with_metadata_take_more_per_name_and_hold_any_one_blob() {
        let plain = PageSize::plain(DEFAULT_PAGE_NAMES);
        let sealed = PageSize::within(DEFAULT_PAGE_NAMES, u64::MAX, true);
        assert_eq!(sealed.names, DEFAULT_PAGE_NAMES);
        assert_eq!(
            sealed.answer_cap(),
            1000 * (ANSWER_BYTES_PER_NAME + METADATA_BYTES_PER_NAME)
        );
        assert!(sealed.bytes() > plain.bytes());
        let one = PageSize::within(DEFAULT_PAGE_NAMES, 0, true);
        assert_eq!(one.names, 1);
        assert_eq!(one.answer_cap(), ONE_BLOB_WITH_METADATA_BYTES);
        // Fits the memory it is given, as a plain page does.
        let half = PageSize::within(DEFAULT_PAGE_NAMES, sealed.bytes() / 2, true);
        assert!(half.bytes() <= sealed.bytes() / 2);
    }

    #[test]
    fn a_page_with_metadata_keeps_the_relays_two_keys_only() {
        let blob = |name: &str, meta: &str| {
            format!(
                "<Blob><Name>{name}</Name><Properties><Etag>0x1</Etag><Content-Length>3</Content-Length></Properties><Metadata>{meta}</Metadata></Blob>"
            )
        };
        let xml = format!(
            "<EnumerationResults><Blobs>{}{}{}</Blobs></EnumerationResults>",
            blob(
                "a",
                "<other>x</other><sha256>AB</sha256><relay_seal>5e</relay_seal><z /><relay_writer>w</relay_writer>"
            ),
            blob("b", ""),
            "<Blob><Name Encoded=\"true\">%01c</Name><Properties><Content-Length>1</Content-Length></Properties></Blob>",
        );
        let page = parse_page(xml.as_bytes(), "").expect("parse");
        assert_eq!(page.blobs.len(), 3);
        assert_eq!(page.blobs[0].sha256.as_deref(), Some("AB"));
        assert_eq!(page.blobs[0].seal.as_deref(), Some("5e"));
        assert_eq!(
            (page.blobs[1].sha256.as_ref(), page.blobs[1].seal.as_ref()),
            (None, None)
        );
        assert_eq!(page.blobs[2].name, "\u{1}c");
        // The seal vouches only under the key that made it, for this name and size.
        let key = IdKey::random();
        let sha = "ab".repeat(32);
        let mut b = page.blobs[0].clone();
        b.sha256 = Some(sha.to_uppercase());
        b.seal = Some(key.seal("c", "a", 3, &sha));
        assert_eq!(b.sealed_sha256(&key, "c"), Some(sha.clone()));
        assert_eq!(b.sealed_sha256(&key, "d"), None);
        assert_eq!(b.sealed_sha256(&IdKey::random(), "c"), None);
        b.size = 4;
        assert_eq!(b.sealed_sha256(&key, "c"), None);
    }
}
