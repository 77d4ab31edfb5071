//! Streaming one archive of a snapshot into a container, checked against
//! its checksum on the way: what a restored node and a shared volume are
//! filled with.

use std::io::Read;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt;

use super::CHUNK;
use super::manifest::SavedFile;
use super::store::{Hashing, damaged, io_error};
use crate::docker::{self, Engine};
use crate::error::Error;

/// Extracts the archive `file` into directory `into` of a container,
/// checking it against its checksum on the way.
pub(super) async fn upload_checked(
    engine: &dyn Engine,
    container: &str,
    into: &str,
    dir: &Path,
    file: &SavedFile,
    snapshot: &str,
    what: &str,
) -> Result<(), Error> {
    let path = dir.join(&file.file);
    let source =
        std::fs::File::open(&path).map_err(io_error(format!("read {}", path.display())))?;
    let digest = Arc::new(Mutex::new(None));
    let body = hashed_stream(source, digest.clone());
    let mismatch = || {
        damaged(
            snapshot,
            &format!("{} does not match its checksum", file.file),
        )
    };
    if let Err(e) = engine.upload_archive(container, into, body).await {
        // A damaged header stops the engine before the checksum is known:
        // then the damage is what to report.
        let whole = tokio::task::spawn_blocking(move || {
            let mut reader = Hashing {
                inner: std::fs::File::open(&path)?,
                hasher: blake3::Hasher::new(),
                bytes: 0,
            };
            std::io::copy(&mut reader, &mut std::io::sink())?;
            Ok::<_, std::io::Error>((reader.bytes, reader.hasher.finalize().to_hex().to_string()))
        })
        .await;
        return match whole {
            Ok(Ok((bytes, hash))) if bytes != file.bytes || hash != file.blake3 => Err(mismatch()),
            _ => Err(docker::engine_error(
                format!("restore {what} into {container}:{into}"),
                e,
            )),
        };
    }
    let got: Option<(u64, String)> = digest.lock().unwrap().take();
    match got {
        Some((bytes, hash)) if bytes == file.bytes && hash == file.blake3 => Ok(()),
        _ => Err(mismatch()),
    }
}

/// The file as a stream of chunks, read and hashed on a thread of its own a
/// few chunks ahead of the engine taking them; at the end, its size and
/// BLAKE3 go into `digest`.
fn hashed_stream(
    mut file: std::fs::File,
    digest: Arc<Mutex<Option<(u64, String)>>>,
) -> futures::stream::BoxStream<'static, std::io::Result<Bytes>> {
    let (chunks, received) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(8);
    tokio::task::spawn_blocking(move || {
        let mut hasher = blake3::Hasher::new();
        let mut bytes = 0u64;
        loop {
            let mut buf = vec![0u8; CHUNK];
            match read_full(&mut file, &mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    buf.truncate(n);
                    hasher.update(&buf);
                    bytes += n as u64;
                    if chunks.blocking_send(Ok(Bytes::from(buf))).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = chunks.blocking_send(Err(e));
                    return;
                }
            }
        }
        *digest.lock().unwrap() = Some((bytes, hasher.finalize().to_hex().to_string()));
    });
    futures::stream::unfold(received, |mut received| async move {
        received.recv().await.map(|chunk| (chunk, received))
    })
    .boxed()
}

/// Reads until `buf` is full or the file ends.
fn read_full(file: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}
