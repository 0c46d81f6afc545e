//! Blocking the current thread on a future without an executor: the thread parks until
//! the future's waker unparks it. Unlike `futures::executor::block_on`, it may be called
//! from inside any executor (a handler's thread runs `send` under one, and a storage
//! failure found there waits for the writer before it returns), where blocking briefly
//! is the point.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// Unparks the thread that waits.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `future` to completion on this thread, parking between polls.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        // A wake between the poll and here leaves the token set: park returns at once.
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_future_woken_from_another_thread_completes_even_inside_another_executor() {
        let (tx, rx) = futures::channel::oneshot::channel::<u32>();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            tx.send(7)
        });
        let got = futures::executor::block_on(async { super::block_on(rx) });
        assert_eq!(got, Ok(7));
        assert!(sender.join().is_ok());
    }
}
