//! A loop's mailbox: what async tasks and other threads hand a zmq loop (replies to send, Raft
//! results) and the node's shutdown, with an inproc doorbell the loop polls beside its own
//! socket. A completion is handled the moment it arrives, not at the loop's next poll timeout
//! (before issue #14 a Dolly Put's or a subscription's reply waited up to 10 ms in a channel,
//! a relay commit's up to 100 ms).
//!
//! Shape: [`Mailbox::new`] gives the loop's end (a crossbeam receiver plus the doorbell's PULL)
//! and a [`Postbox`] that clones freely into tokio tasks. A post is `channel send, then ring`;
//! the loop `drains the bell, then the channel`, so no post is missed: a ring that arrives
//! after the drain wakes the next poll. Rings coalesce through a flag (at most two queued), so
//! a burst of posts costs one wake-up.
//!
//! Bounds (issue #13): the channel is unbounded in type only; every loop limits what it has in
//! flight (subscriptions [`crate::control::controller::SUBSCRIPTIONS_IN_PROGRESS`], Dolly
//! [`crate::dolly::PENDING_TOTAL`], one commit per relay stream), so it holds at most that many.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_channel::{Receiver, Sender};

/// The node's shutdown: a flag every loop checks and the doorbells of the loops that would
/// otherwise sleep until their poll timeout.
#[derive(Clone, Default)]
pub struct Shutdown {
    flag: Arc<AtomicBool>,
    bells: Arc<Mutex<Vec<Doorbell>>>,
}

impl Shutdown {
    /// True once [`Shutdown::trigger`] ran.
    pub fn is_set(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// The flag itself, for loops that poll it (they see it within their poll period).
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.flag.clone()
    }

    /// Sets the flag and rings every registered doorbell.
    pub fn trigger(&self) {
        self.flag.store(true, Ordering::Release);
        let bells = match self.bells.lock() {
            Ok(b) => b.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        for bell in bells {
            bell.ring();
        }
    }

    fn register(&self, bell: Doorbell) {
        match self.bells.lock() {
            Ok(mut b) => b.push(bell),
            Err(poisoned) => poisoned.into_inner().push(bell),
        }
    }
}

/// The ringing end of a doorbell: an inproc PUSH behind a mutex (zmq sockets are Send, not
/// Sync) and a flag that coalesces rings.
///
/// The PUSH has no high-water mark. With a mark of 1 (before the attack on issue #14) a send
/// could be refused with EAGAIN while the bell was already empty (libzmq learns that the peer
/// read lazily), and a loop polling with no timeout missed the post: about 1 Dolly Put in 500
/// got no reply. Instead the flag keeps at most two rings queued: a post sends only when the
/// flag was clear, and the loop clears it after taking the rings and before taking the posts.
#[derive(Clone)]
struct Doorbell {
    push: Arc<Mutex<zmq::Socket>>,
    rung: Arc<AtomicBool>,
}

impl Doorbell {
    fn ring(&self) {
        if self.rung.swap(true, Ordering::AcqRel) {
            return; // a ring is queued and the loop has not taken the posts yet
        }
        let push = match self.push.lock() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        };
        // No high-water mark: an inproc send does not fail while the loop's socket exists.
        let _ = push.send(&[][..], zmq::DONTWAIT);
    }
}

/// The posting end: clone it into every task that completes work for the loop.
pub struct Postbox<T> {
    tx: Sender<T>,
    bell: Doorbell,
}

impl<T> Clone for Postbox<T> {
    fn clone(&self) -> Self {
        Postbox {
            tx: self.tx.clone(),
            bell: self.bell.clone(),
        }
    }
}

impl<T> Postbox<T> {
    /// Hands `item` to the loop and wakes it. False when the loop has ended.
    pub fn post(&self, item: T) -> bool {
        let sent = self.tx.send(item).is_ok();
        if sent {
            self.bell.ring();
        }
        sent
    }
}

/// The loop's end: poll [`Mailbox::poll_item`] beside the loop's socket, then call
/// [`Mailbox::drain`].
pub struct Mailbox<T> {
    rx: Receiver<T>,
    bell: zmq::Socket,
    rung: Arc<AtomicBool>,
    shutdown: Shutdown,
}

impl<T> Mailbox<T> {
    /// A mailbox for the loop `name` (a label in the inproc address), woken by posts and by
    /// `shutdown`.
    ///
    /// Errors: the inproc sockets cannot be created (the context is terminated, or out of
    /// file descriptors).
    pub fn new(
        ctx: &zmq::Context,
        name: &str,
        shutdown: &Shutdown,
    ) -> Result<(Mailbox<T>, Postbox<T>), zmq::Error> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let address = format!(
            "inproc://zper-mailbox-{name}-{}",
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let pull = ctx.socket(zmq::PULL)?;
        pull.set_rcvhwm(0)?;
        pull.set_linger(0)?;
        pull.bind(&address)?;
        let push = ctx.socket(zmq::PUSH)?;
        push.set_sndhwm(0)?;
        push.set_linger(0)?;
        push.connect(&address)?;
        let rung = Arc::new(AtomicBool::new(false));
        let bell = Doorbell {
            push: Arc::new(Mutex::new(push)),
            rung: rung.clone(),
        };
        shutdown.register(bell.clone());
        let (tx, rx) = crossbeam_channel::unbounded();
        Ok((
            Mailbox {
                rx,
                bell: pull,
                rung,
                shutdown: shutdown.clone(),
            },
            Postbox { tx, bell },
        ))
    }

    /// The doorbell as a poll item (readable when something was posted or shutdown began).
    pub fn poll_item(&self) -> zmq::PollItem<'_> {
        self.bell.as_poll_item(zmq::POLLIN)
    }

    /// Everything posted so far, after silencing the doorbell.
    pub fn drain(&self) -> Vec<T> {
        // Rings first, then the flag, then the posts: a post whose ring was skipped because
        // the flag was set is in the channel before the flag is cleared here, and a post after
        // the clear rings again.
        while self.bell.recv_bytes(zmq::DONTWAIT).is_ok() {}
        self.rung.store(false, Ordering::Release);
        self.rx.try_iter().collect()
    }

    /// True once the node shuts down.
    pub fn stopping(&self) -> bool {
        self.shutdown.is_set()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(m: &Mailbox<u32>, timeout_ms: i64) -> bool {
        let mut items = [m.poll_item()];
        zmq::poll(&mut items, timeout_ms).expect("poll") > 0 && items[0].is_readable()
    }

    #[test]
    fn a_post_wakes_the_loop_at_once_and_is_drained_in_order() {
        let ctx = zmq::Context::new();
        let shutdown = Shutdown::default();
        let (mailbox, postbox) = Mailbox::<u32>::new(&ctx, "test", &shutdown).expect("mailbox");
        assert!(!readable(&mailbox, 0), "nothing posted yet");
        let tasks: Vec<_> = (0..4)
            .map(|i| {
                let p = postbox.clone();
                std::thread::spawn(move || {
                    for k in 0..100 {
                        assert!(p.post(i * 1000 + k));
                    }
                })
            })
            .collect();
        for t in tasks {
            t.join().expect("poster");
        }
        // With an infinite timeout this would hang if the rings were lost.
        assert!(readable(&mailbox, -1));
        let mut got = mailbox.drain();
        assert_eq!(got.len(), 400, "every post arrives, rings coalesce");
        for i in 0..4 {
            let mine: Vec<u32> = got.iter().copied().filter(|v| v / 1000 == i).collect();
            assert!(
                mine.windows(2).all(|w| w[0] < w[1]),
                "one poster's order kept"
            );
        }
        got.clear();
        assert!(!readable(&mailbox, 0), "drain silences the bell");
        assert!(mailbox.drain().is_empty());
    }

    #[test]
    fn a_post_after_the_drain_rings_again() {
        let ctx = zmq::Context::new();
        let shutdown = Shutdown::default();
        let (mailbox, postbox) = Mailbox::<u32>::new(&ctx, "again", &shutdown).expect("mailbox");
        assert!(postbox.post(1));
        assert_eq!(mailbox.drain(), vec![1]);
        assert!(postbox.post(2));
        assert!(readable(&mailbox, -1));
        assert_eq!(mailbox.drain(), vec![2]);
    }

    #[test]
    fn no_post_is_missed_when_each_waits_for_the_last_to_be_taken() {
        // The attack's pattern (issue #14 F1): one post at a time, the loop polling without a
        // timeout between them. With a doorbell of high-water mark 1, some 1 in 30 posts
        // found the send refused and were never seen.
        let ctx = zmq::Context::new();
        let shutdown = Shutdown::default();
        let (mailbox, postbox) = Mailbox::<u32>::new(&ctx, "lockstep", &shutdown).expect("mailbox");
        let (taken_tx, taken_rx) = crossbeam_channel::bounded::<()>(1);
        const POSTS: u32 = 5000;
        let poster = std::thread::spawn(move || {
            for i in 0..POSTS {
                assert!(postbox.post(i));
                if taken_rx.recv().is_err() {
                    return;
                }
            }
        });
        for i in 0..POSTS {
            // 5 s instead of -1 so that a lost post fails the test instead of hanging it.
            assert!(readable(&mailbox, 5000), "post {i} woke the loop");
            let got = mailbox.drain();
            assert_eq!(got, vec![i]);
            taken_tx.send(()).expect("poster");
        }
        poster.join().expect("poster");
    }

    #[test]
    fn shutdown_rings_every_mailbox_and_posting_to_an_ended_loop_fails() {
        let ctx = zmq::Context::new();
        let shutdown = Shutdown::default();
        let (a, _pa) = Mailbox::<u32>::new(&ctx, "a", &shutdown).expect("mailbox");
        let (b, pb) = Mailbox::<u32>::new(&ctx, "b", &shutdown).expect("mailbox");
        assert!(!a.stopping());
        shutdown.trigger();
        assert!(readable(&a, -1) && readable(&b, -1));
        assert!(a.stopping() && b.stopping() && shutdown.is_set());
        drop(b);
        assert!(!pb.post(7), "the loop's end is gone");
    }
}
