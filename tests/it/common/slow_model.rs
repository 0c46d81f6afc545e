//! A slow model for tests that cancel a reply (the chat's Ctrl-C, the page's Stop).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::time::Duration;

/// A local OpenAI-compatible server whose one reply streams a word every 100 ms for a
/// long time, so that there is a generation to cancel.
pub fn server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut length = 0;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                if stream.write_all(head.as_bytes()).is_err() {
                    return;
                }
                for i in 0..600 {
                    let chunk = serde_json::json!({
                        "id": "slow", "object": "chat.completion.chunk", "model": "slow",
                        "choices": [{"index": 0, "delta": {"content": format!("word{i} ")}, "finish_reason": null}]
                    });
                    if stream.write_all(format!("data: {chunk}\n\n").as_bytes()).and_then(|()| stream.flush()).is_err()
                    {
                        return; // the client hung up: cancelled
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
        }
    });
    url
}
