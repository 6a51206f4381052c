//! The in-memory overlay of one regular file: what has been written (or truncated) since the
//! backing file was last brought up to date by an `fsync`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::time::SystemTime;

/// Unsynced changes of one file, over the contents of its backing file.
///
/// The logical contents are: the dirty `extents`, then backing bytes below `keep`, then zeros,
/// up to `size`. `keep` is the smallest size the file had since the last sync (bytes of the
/// backing file above it were truncated away and read back as zeros if the file grew again).
#[derive(Debug, Clone)]
pub(crate) struct Overlay {
    /// Length of the backing file (the durable contents).
    base_len: u64,
    /// Backing bytes in `[0, keep)` are still visible where no extent covers them.
    keep: u64,
    /// Logical size of the file.
    size: u64,
    /// Dirty ranges, by start offset; never overlapping nor touching.
    extents: BTreeMap<u64, Vec<u8>>,
    /// Modification time of the last unsynced change (reported by `getattr`).
    pub(crate) mtime: Option<SystemTime>,
}

impl Overlay {
    /// A clean overlay over a backing file of `base_len` bytes.
    pub(crate) fn new(base_len: u64) -> Overlay {
        Overlay {
            base_len,
            keep: base_len,
            size: base_len,
            extents: BTreeMap::new(),
            mtime: None,
        }
    }

    /// Logical size.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Bytes a power loss would drop: the dirty extents plus the bytes a pending shrink would
    /// have removed (which the loss brings back).
    pub(crate) fn dirty_bytes(&self) -> u64 {
        let written: u64 = self.extents.values().map(|e| e.len() as u64).sum();
        written + (self.base_len - self.keep)
    }

    /// Whether anything differs from the backing file.
    pub(crate) fn is_dirty(&self) -> bool {
        !self.extents.is_empty() || self.keep != self.base_len || self.size != self.base_len
    }

    /// Records a write of `data` at `offset`.
    pub(crate) fn write(&mut self, offset: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let len = data.len() as u64;
        let end = offset + len;
        self.size = self.size.max(end);
        self.mtime = Some(SystemTime::now());
        // Extents that overlap or touch [offset, end].
        let touching: Vec<u64> = self
            .extents
            .range(..=end)
            .rev()
            .take_while(|(start, ext)| **start + ext.len() as u64 >= offset)
            .map(|(start, _)| *start)
            .collect();
        match touching.as_slice() {
            [] => {
                self.extents.insert(offset, data.to_vec());
            }
            [start] if *start <= offset => {
                // One extent that begins at or before the write: update it in place (the
                // common case of sequential appends and overwrites).
                if let Some(ext) = self.extents.get_mut(start) {
                    let rel = (offset - start) as usize;
                    if rel + data.len() <= ext.len() {
                        ext[rel..rel + data.len()].copy_from_slice(data);
                    } else {
                        ext.truncate(rel);
                        ext.extend_from_slice(data);
                    }
                }
            }
            _ => {
                let first = touching.iter().copied().min().unwrap_or(offset).min(offset);
                let mut last = end;
                let mut olds = Vec::with_capacity(touching.len());
                for start in &touching {
                    if let Some(ext) = self.extents.remove(start) {
                        last = last.max(start + ext.len() as u64);
                        olds.push((*start, ext));
                    }
                }
                let mut merged = vec![0u8; (last - first) as usize];
                for (start, ext) in olds {
                    let rel = (start - first) as usize;
                    merged[rel..rel + ext.len()].copy_from_slice(&ext);
                }
                let rel = (offset - first) as usize;
                merged[rel..rel + data.len()].copy_from_slice(data);
                self.extents.insert(first, merged);
            }
        }
    }

    /// Records a change of size (truncate or extension with zeros).
    pub(crate) fn set_size(&mut self, size: u64) {
        self.mtime = Some(SystemTime::now());
        if size < self.size {
            let cut: Vec<u64> = self.extents.range(size..).map(|(s, _)| *s).collect();
            for start in cut {
                self.extents.remove(&start);
            }
            if let Some((start, ext)) = self.extents.range_mut(..size).next_back() {
                let keep = (size - start) as usize;
                if ext.len() > keep {
                    ext.truncate(keep);
                }
            }
            self.keep = self.keep.min(size);
        }
        self.size = size;
    }

    /// Reads up to `len` bytes at `offset` of the logical contents; `backing` is the backing
    /// file (read for the ranges no extent covers).
    pub(crate) fn read(&self, backing: &File, offset: u64, len: u32) -> io::Result<Vec<u8>> {
        let end = self.size.min(offset.saturating_add(u64::from(len)));
        if offset >= end {
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; (end - offset) as usize];
        let backing_end = end.min(self.keep);
        if offset < backing_end {
            read_fully_at(backing, &mut buf[..(backing_end - offset) as usize], offset)?;
        }
        // The extent that starts before `offset` may reach into the range.
        let from = self
            .extents
            .range(..=offset)
            .next_back()
            .map_or(offset, |(s, _)| *s);
        for (start, ext) in self.extents.range(from..end) {
            let ext_end = start + ext.len() as u64;
            if ext_end <= offset {
                continue;
            }
            let lo = offset.max(*start);
            let hi = end.min(ext_end);
            buf[(lo - offset) as usize..(hi - offset) as usize]
                .copy_from_slice(&ext[(lo - start) as usize..(hi - start) as usize]);
        }
        Ok(buf)
    }

    /// Writes the overlay into the backing file (which must be opened for writing) so that its
    /// contents equal the logical contents. Does not sync it.
    pub(crate) fn apply(&self, backing: &File) -> io::Result<()> {
        if self.keep < self.base_len {
            backing.set_len(self.keep)?;
        }
        for (start, ext) in &self.extents {
            backing.write_all_at(ext, *start)?;
        }
        backing.set_len(self.size)
    }
}

/// Reads exactly `buf.len()` bytes at `offset`, leaving zeros past the end of the file.
pub(crate) fn read_fully_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::io::Write;

    /// A reference model: the full logical contents as a vector.
    fn check(ov: &Overlay, backing: &File, model: &[u8]) {
        assert_eq!(ov.size(), model.len() as u64);
        let all = ov.read(backing, 0, u32::MAX).unwrap();
        assert_eq!(all, model);
        for off in [0usize, 1, 3, 7, 100] {
            let got = ov.read(backing, off as u64, 5).unwrap();
            let want: Vec<u8> = model.iter().skip(off).take(5).copied().collect();
            assert_eq!(got, want, "read at {off}");
        }
    }

    fn backing_with(data: &[u8]) -> (tempfile::TempDir, File) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut f = File::create(&path).unwrap();
        f.write_all(data).unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        (dir, f)
    }

    #[test]
    fn writes_truncates_and_apply_match_a_model() {
        let base = b"0123456789abcdef".to_vec();
        let (_dir, file) = backing_with(&base);
        let mut ov = Overlay::new(base.len() as u64);
        let mut model = base.clone();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..2000 {
            let r = next();
            if r % 7 == 0 {
                let size = (next() % 40) as usize;
                ov.set_size(size as u64);
                model.resize(size, 0);
            } else {
                let off = (next() % 40) as usize;
                let len = (next() % 9) as usize;
                let byte = (round % 251) as u8;
                let data = vec![byte; len];
                ov.write(off as u64, &data);
                if !data.is_empty() {
                    if model.len() < off + len {
                        model.resize(off + len, 0);
                    }
                    model[off..off + len].copy_from_slice(&data);
                }
            }
            check(&ov, &file, &model);
            // Extents never overlap nor touch.
            let mut prev_end = None;
            for (s, e) in &ov.extents {
                if let Some(p) = prev_end {
                    assert!(*s > p, "extents touch at {s}");
                }
                prev_end = Some(s + e.len() as u64);
            }
        }
        ov.apply(&file).unwrap();
        let mut on_disk = Vec::new();
        std::io::Read::read_to_end(&mut &file, &mut on_disk).unwrap();
        assert_eq!(on_disk, model);
    }

    #[test]
    fn shrink_then_grow_reads_zeros_not_old_bytes() {
        let (_dir, file) = backing_with(b"abcdefgh");
        let mut ov = Overlay::new(8);
        ov.set_size(2);
        ov.set_size(6);
        assert_eq!(ov.read(&file, 0, 100).unwrap(), b"ab\0\0\0\0");
        assert_eq!(ov.dirty_bytes(), 6);
        ov.write(4, b"XY");
        assert_eq!(ov.read(&file, 0, 100).unwrap(), b"ab\0\0XY");
        ov.apply(&file).unwrap();
        assert_eq!(std::fs::read(_dir.path().join("f")).unwrap(), b"ab\0\0XY");
    }
}
