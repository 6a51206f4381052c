//! Segment files (spec `zper.md` §6.1): `<start offset as 20 zero-padded digits>.dat`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::index::SparseIndex;

/// File name of the segment starting at absolute offset `start`.
pub fn file_name(start: u64) -> String {
    format!("{start:020}.dat")
}

/// Parses a segment file name; `None` for anything but exactly 20 digits + `.dat` (§6.1: other
/// files are ignored).
pub fn parse_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".dat")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// One open segment file.
#[derive(Debug)]
pub struct Segment {
    /// Absolute offset of its first byte.
    pub start: u64,
    /// Path of the file.
    pub path: PathBuf,
    /// Open for read and append.
    pub file: File,
    /// Record boundaries, built on append or lazily on first lookup.
    pub(crate) index: Mutex<SparseIndex>,
}

impl Segment {
    pub(crate) fn new(start: u64, path: &Path, file: File, index: SparseIndex) -> Self {
        Segment {
            start,
            path: path.to_owned(),
            file,
            index: Mutex::new(index),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_20_digit_offsets_spec_6_1() {
        assert_eq!(file_name(0), "00000000000000000000.dat");
        assert_eq!(file_name(288), "00000000000000000288.dat");
        assert_eq!(parse_file_name("00000000000000000288.dat"), Some(288));
        assert_eq!(parse_file_name("0000000000000000288.dat"), None);
        assert_eq!(parse_file_name("00000000000000000288.dat.tmp"), None);
        assert_eq!(parse_file_name("0000000000000000028x.dat"), None);
        assert_eq!(parse_file_name("99999999999999999999.dat"), None);
    }
}
