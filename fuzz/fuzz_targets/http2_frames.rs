//! What an HTTP/2 client sends after the connection preface, as the server reads it: the
//! frame decoder and HPACK (the h2 crate, with ramjet's SETTINGS and header-list limit),
//! and ramjet's flood meter on the same bytes. The connection is driven until it ends or
//! the input is used up; every request is answered 200 at once. Never panic.
#![no_main]
use std::future::poll_fn;
use std::task::Poll;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use ramjet_pipeline::http2::meter::{Meter, PREFACE};
use tokio::io::AsyncWriteExt;

fuzz_target!(|data: &[u8]| {
    let mut meter = Meter::new();
    let now = std::time::Instant::now();
    let _ = meter.feed(PREFACE, || now);
    let _ = meter.feed(data, || now);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let mut input = PREFACE.to_vec();
        input.extend_from_slice(data);
        client.write_all(&input).await.unwrap();
        client.shutdown().await.unwrap();
        let builder = ramjet_pipeline::http2::builder(16 * 1024);
        let Ok(Ok(mut conn)) = tokio::time::timeout(
            std::time::Duration::from_millis(100),
            builder.handshake::<_, Bytes>(server),
        )
        .await
        else {
            return;
        };
        // Until the connection ends (the input ends it: EOF), at most a few thousand turns.
        for _ in 0..10_000 {
            let step = poll_fn(|cx| match conn.poll_accept(cx) {
                Poll::Ready(r) => Poll::Ready(Some(r)),
                Poll::Pending => Poll::Ready(None),
            })
            .await;
            match step {
                Some(Some(Ok((_req, mut respond)))) => {
                    let _ = respond.send_response(http::Response::new(()), true);
                }
                Some(_) => break,
                None => tokio::task::yield_now().await,
            }
        }
    });
});
