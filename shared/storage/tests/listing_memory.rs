//! What one listing page costs in memory, measured: a page's answer (read into
//! one buffer of the page's answer cap) and its parse, at their peak, stay
//! within `PageSize::bytes`, the amount the relay takes from its memory
//! budget before it asks storage for the page. Counted by a global allocator
//! that tracks the bytes allocated (capacities, so more than is resident),
//! for the pages that cost the most: the longest names (in three-byte
//! characters, escaped, percent-encoded) and the shortest names with every
//! property storage writes.
//!
//! `cargo test -p relay-storage --test listing_memory -- --nocapture` prints
//! each case's peak.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use relay_storage::listing::{DEFAULT_PAGE_NAMES, MAX_PAGE_NAMES, PageSize, parse_page};

struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; the
// counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = NOW.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
        PEAK.fetch_max(now, Ordering::SeqCst);
        // SAFETY: the caller's layout, as GlobalAlloc requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        NOW.fetch_sub(layout.size(), Ordering::SeqCst);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// One case at a time: the counters are process-wide.
static ONE: Mutex<()> = Mutex::new(());

/// Every property Azure writes for a block blob, at its usual length.
const PROPERTIES: &str = "<Creation-Time>Wed, 01 Jan 2025 00:00:00 GMT</Creation-Time><Last-Modified>Wed, 01 Jan 2025 00:00:00 GMT</Last-Modified><Etag>0x8DD2A6F1B2C3D4E</Etag><Content-Length>1048576</Content-Length><Content-Type>application/octet-stream</Content-Type><Content-Encoding /><Content-Language /><Content-CRC64 /><Content-MD5>1B2M2Y8AsgTpgAmY7PhCfg==</Content-MD5><Cache-Control /><Content-Disposition /><BlobType>BlockBlob</BlobType><AccessTier>Hot</AccessTier><AccessTierInferred>true</AccessTierInferred><LeaseStatus>unlocked</LeaseStatus><LeaseState>available</LeaseState><ServerEncrypted>true</ServerEncrypted>";

const HEAD: &str = "\u{feff}<?xml version=\"1.0\" encoding=\"utf-8\"?><EnumerationResults ServiceEndpoint=\"https://account.blob.core.windows.net/\" ContainerName=\"c\"><MaxResults>1000</MaxResults><Blobs>";
const TAIL: &str = "</Blobs><NextMarker>2!108!MDAwMDQ2IXJlc3VsdHMvMjAyNi9ydW4xL2ZpbGUtMDAwOTk5LmJpbiEwMDAwMjghOTk5OS0xMi0zMVQyMzo1OTo1OS45OTk5OTk5WiE-</NextMarker></EnumerationResults>";

/// An answer of as many blobs, named by `name`, each with `metadata`, as
/// fit the page's answer cap.
fn fill(size: PageSize, name: impl Fn(u32) -> String, metadata: &str) -> Vec<u8> {
    let mut xml = String::from(HEAD);
    for i in 0..size.names {
        let blob = format!(
            "<Blob>{}<Properties>{PROPERTIES}</Properties>{metadata}<OrMetadata /></Blob>",
            name(i)
        );
        if (xml.len() + blob.len() + TAIL.len()) as u64 > size.answer_cap() {
            break;
        }
        xml.push_str(&blob);
    }
    xml.push_str(TAIL);
    xml.into_bytes()
}

/// Peak bytes allocated while `answer` sits in a buffer of the answer cap
/// and is parsed, and the parsed page is held; the names parsed.
fn measure(size: PageSize, answer: &[u8]) -> (u64, usize) {
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let base = NOW.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    let cap = usize::try_from(size.answer_cap()).expect("cap");
    let mut buffer = Vec::with_capacity(cap);
    buffer.extend_from_slice(answer);
    let page = parse_page(&buffer, "").expect("parse");
    drop(buffer);
    let n = page.blobs.len();
    let peak = PEAK.load(Ordering::SeqCst) - base;
    drop(page);
    (peak as u64, n)
}

/// The `<Name>` element of a page's `i`th blob.
type NameOf = Box<dyn Fn(u32) -> String>;

#[test]
fn a_page_and_its_parse_stay_within_the_memory_taken_for_it() {
    let long = |c: &str, i: u32| format!("{i:06}{}", c.repeat(1018));
    let cases: Vec<(&str, NameOf)> = vec![
        (
            "1,024 three-byte characters",
            Box::new(move |i| format!("<Name>{}</Name>", long("\u{FF01}", i))),
        ),
        (
            "1,024 characters, each escaped",
            Box::new(move |i| format!("<Name>{}</Name>", long("&amp;", i))),
        ),
        (
            "1,024 characters, percent-encoded",
            Box::new(move |i| format!("<Name Encoded=\"true\">{}</Name>", long("%01", i))),
        ),
        ("short names", Box::new(|i| format!("<Name>r/{i}</Name>"))),
    ];
    // The relay's own three keys; then 8 KiB of one-letter pairs (the
    // most metadata storage keeps, in the pairs that cost a map the most).
    let sealed = format!(
        "<Metadata><sha256>{}</sha256><relay_seal>{}</relay_seal><relay_writer>{}</relay_writer></Metadata>",
        "ab".repeat(32),
        "5e".repeat(16),
        "77".repeat(16)
    );
    let tiny: String = (0..4000)
        .map(|i| format!("<m{}>x</m{}>", i % 10, i % 10))
        .collect();
    let crowded = format!("<Metadata>{tiny}</Metadata>");
    let pages = [
        (PageSize::plain(DEFAULT_PAGE_NAMES), ""),
        (PageSize::plain(MAX_PAGE_NAMES), ""),
        (PageSize::plain(16), ""),
        (
            PageSize::within(DEFAULT_PAGE_NAMES, u64::MAX, true),
            sealed.as_str(),
        ),
        (PageSize::within(16, u64::MAX, true), crowded.as_str()),
        (PageSize::within(1, u64::MAX, true), crowded.as_str()),
    ];
    for (size, metadata) in pages {
        let names = size.names;
        for (what, name) in &cases {
            let answer = fill(size, name, metadata);
            let (peak, parsed) = measure(size, &answer);
            let what = format!("{what}, {} bytes of metadata", metadata.len());
            println!(
                "page of {names} names, {what}: {parsed} parsed from {} bytes; peak {peak} bytes of {} taken",
                answer.len(),
                size.bytes()
            );
            assert!(parsed > 0, "{what}");
            assert!(
                peak <= size.bytes(),
                "page of {names}, {what}: peak {peak} above {}",
                size.bytes()
            );
        }
    }
}
