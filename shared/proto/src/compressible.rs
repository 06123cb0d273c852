//! Whether a blob is worth trying to compress at all, before a byte of it is
//! read: the relay asks this of every download whose client asked for
//! compressed chunks. A blob that is already compressed by its format (its
//! content type or its name's ending says so) goes plain without a trial,
//! so it costs the relay no compressor and no budget; every other blob is
//! tried chunk by chunk (`compress::Policy`, whose spread sample finds data
//! that does not shrink for about a sample's cost). Only a small blob is
//! plain whatever it holds: its chunk header and frame would cost about
//! what compression saves.
//!
//! A wrong answer here costs time, never bytes: a chunk that does not shrink
//! goes plain either way, and the blob is always its own bytes.

/// Blobs smaller than this go plain: a frame's own header (up to 18 bytes)
/// and a chunk's (9) against what a few hundred bytes of text save.
pub const MIN_BYTES: u64 = 512;

/// Content types whose bytes are compressed by their format.
const COMPRESSED_TYPES: &[&str] = &[
    "application/gzip",
    "application/x-gzip",
    "application/zip",
    "application/x-zip-compressed",
    "application/zstd",
    "application/x-zstd",
    "application/x-xz",
    "application/x-bzip2",
    "application/x-7z-compressed",
    "application/vnd.rar",
    "application/x-rar-compressed",
    "application/x-lz4",
    "application/java-archive",
    "image/jpeg",
    "image/png",
    "image/gif",
    "image/webp",
    "image/avif",
    "image/heic",
    "image/heif",
    "audio/mpeg",
    "audio/aac",
    "audio/ogg",
    "audio/opus",
    "audio/flac",
    "audio/mp4",
];

/// Name endings (lower case, after the last dot) of formats that compress
/// their own bytes: archives, media, and the genomics formats that are
/// BGZF inside (BAM, CRAM, BCF, `.vcf.gz`).
const COMPRESSED_ENDINGS: &[&str] = &[
    "gz", "tgz", "zst", "zstd", "xz", "txz", "bz2", "tbz2", "lz4", "lzma", "br", "zip", "7z",
    "rar", "jar", "war", "whl", "apk", "docx", "xlsx", "pptx", "odt", "ods", "jpg", "jpeg", "png",
    "gif", "webp", "avif", "heic", "heif", "mp3", "m4a", "aac", "ogg", "opus", "flac", "mp4",
    "m4v", "mkv", "mov", "webm", "avi", "bam", "cram", "bcf",
];

/// Whether the relay should try to compress this blob's chunks: `name` the
/// blob's name, `content_type` what storage holds for it, `size` its bytes.
pub fn worth_trying(name: &str, content_type: Option<&str>, size: u64) -> bool {
    if size < MIN_BYTES {
        return false;
    }
    if let Some(t) = content_type {
        // `type/subtype; parameters`, any case.
        let t = t.split(';').next().unwrap_or_default().trim();
        if t.starts_with("video/") || COMPRESSED_TYPES.iter().any(|c| c.eq_ignore_ascii_case(t)) {
            return false;
        }
    }
    let leaf = name.rsplit('/').next().unwrap_or(name);
    match leaf.rsplit_once('.') {
        Some((stem, ending)) if !stem.is_empty() => !COMPRESSED_ENDINGS
            .iter()
            .any(|e| e.eq_ignore_ascii_case(ending)),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressed_formats_go_plain_and_everything_else_is_tried() {
        let kib = 1024;
        // (name, content type, size, worth trying)
        let cases: &[(&str, Option<&str>, u64, bool)] = &[
            ("logs/app.log", Some("text/plain"), 100 * kib, true),
            ("run1/reads.fastq", None, 1 << 30, true),
            ("run1/reads.fastq.gz", None, 1 << 30, false),
            (
                "run1/reads.FASTQ.GZ",
                Some("application/octet-stream"),
                kib,
                false,
            ),
            ("data/table.csv", Some("text/csv; charset=utf-8"), kib, true),
            ("disk.img", Some("application/octet-stream"), 1 << 30, true),
            ("f-000001.bin", None, 256 << 20, true),
            // The content type alone says so, whatever the name.
            ("upload-42", Some("image/JPEG"), 5 << 20, false),
            ("clip", Some("video/mp4"), 5 << 20, false),
            ("x.dat", Some("application/gzip; q=1"), 5 << 20, false),
            ("photo.jpeg", None, 5 << 20, false),
            ("a/b/archive.tar.zst", None, 5 << 20, false),
            ("sample.bam", None, 5 << 20, false),
            // A tar, an SVG, a WAV or a TIFF compresses.
            ("backup.tar", Some("application/x-tar"), 5 << 20, true),
            ("logo.svg", Some("image/svg+xml"), 5 << 20, true),
            ("take.wav", Some("audio/wav"), 5 << 20, true),
            ("scan.tiff", Some("image/tiff"), 5 << 20, true),
            // A dot file or no ending: tried.
            (".gz", None, 5 << 20, true),
            ("dir.gz/readme", None, 5 << 20, true),
            ("Makefile", None, 5 << 20, true),
            // Small and empty blobs go plain.
            ("tiny.log", Some("text/plain"), MIN_BYTES - 1, false),
            ("edge.log", Some("text/plain"), MIN_BYTES, true),
            ("empty.txt", None, 0, false),
        ];
        for &(name, ct, size, want) in cases {
            assert_eq!(worth_trying(name, ct, size), want, "{name} {ct:?} {size}");
        }
    }
}
