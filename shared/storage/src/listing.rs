//! A container's blobs, one page of List Blobs (flat) at a time, in memory a
//! caller can count before it asks.
//!
//! A page's answer is read into one buffer of at most its `PageSize`'s answer
//! cap (`ANSWER_BYTES_PER_NAME` per name asked for): an answer that would be
//! larger (names of 1,024 escaped characters, properties of kilobytes) is
//! dropped unread past the cap and asked again for a quarter of the names,
//! down to one, so a page never holds more than `PageSize::bytes` whatever
//! the blobs are called. The answer is parsed with the SDK's own model (it
//! decodes names storage sent percent-encoded), then kept as `ListedBlob`s.
//!
//! Names outside the prefix asked for are dropped: a listing taken up from
//! a marker a caller handed back (opaque to the reader, so possibly forged)
//! still yields only what the prefix selects.

use azure_core::error::{CheckSuccessOptions, ErrorKind};
use azure_core::http::{Context, Method, PipelineStreamOptions, Request};
use azure_storage_blob::models::ListBlobsResponse;

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

/// One page's size: the names asked for, and so the memory it may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageSize {
    pub names: u32,
}

impl PageSize {
    /// Largest answer read for a page of this size.
    pub fn answer_cap(&self) -> u64 {
        u64::from(self.names.max(1)) * ANSWER_BYTES_PER_NAME
    }

    /// The most memory one page holds at once: its answer (at most the cap),
    /// the model parsed from it (its strings no longer than the answer) and
    /// the entries kept.
    pub fn bytes(&self) -> u64 {
        2 * self.answer_cap() + u64::from(self.names.max(1)) * ENTRY_BYTES
    }

    /// The page of at most `names` (1 to `MAX_PAGE_NAMES`) whose memory is
    /// at most `bytes`: fewer names when memory is tight, never fewer than one.
    pub fn within(names: u32, bytes: u64) -> PageSize {
        let names = names.clamp(1, MAX_PAGE_NAMES);
        let per_name = 2 * ANSWER_BYTES_PER_NAME + ENTRY_BYTES;
        let fit = u32::try_from(bytes / per_name).unwrap_or(u32::MAX);
        PageSize {
            names: names.min(fit).max(1),
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
}

impl Lister {
    pub fn requests(&self) -> u32 {
        self.w.requests()
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
        }
        let version = self.w.account.version.clone();
        let answer = self
            .w
            .with_retry("List Blobs", false, std::time::Duration::ZERO, || {
                let mut r = Request::new(url.clone(), Method::Get);
                r.insert_header("accept", "application/xml");
                r.insert_header("x-ms-version", version.clone());
                async move {
                    let options = PipelineStreamOptions {
                        check_success: CheckSuccessOptions {
                            success_codes: &[200],
                        },
                        ..Default::default()
                    };
                    let resp = self
                        .w
                        .account
                        .pipeline
                        .stream(&Context::new(), &mut r, Some(options))
                        .await?;
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

/// A List Blobs answer as a page: the blobs whose names start with `prefix`
/// (others dropped), each ETag in the headers' form, and the next marker.
pub fn parse_page(answer: &[u8], prefix: &str) -> Result<ListPage, String> {
    let xml = answer.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(answer);
    // Not `azure_core::xml::from_xml`: its error quotes the whole answer.
    let list: ListBlobsResponse = quick_xml::de::from_reader(xml)
        .map_err(|e| format!("storage's List Blobs answer is not a listing: {e}"))?;
    let blobs = list
        .blob_items
        .into_iter()
        .filter_map(|item| {
            let props = item.properties?;
            let name = item.name.filter(|n| n.starts_with(prefix))?;
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
        let full = PageSize {
            names: DEFAULT_PAGE_NAMES,
        };
        assert_eq!(full.answer_cap(), 4000 << 10);
        assert_eq!(full.bytes(), 2 * (4000 << 10) + 1000 * (3 << 10));
        assert_eq!(PageSize::within(DEFAULT_PAGE_NAMES, full.bytes()), full);
        assert_eq!(PageSize::within(DEFAULT_PAGE_NAMES, u64::MAX), full);
        assert_eq!(PageSize::within(9000, u64::MAX).names, MAX_PAGE_NAMES);
        let half = PageSize::within(DEFAULT_PAGE_NAMES, full.bytes() / 2);
        assert_eq!(half.names, 500);
        assert!(half.bytes() <= full.bytes() / 2);
        assert_eq!(PageSize::within(DEFAULT_PAGE_NAMES, 0).names, 1);
        assert_eq!(PageSize::within(0, u64::MAX).names, 1);
    }
}
