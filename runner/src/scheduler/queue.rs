//! The queue of dirty computations.

use std::collections::VecDeque;

use super::ComputationId;

/// Dirty computations by the height they were queued at, each height in the order
/// queued: taking the next is finding the lowest height with one (heights are small
/// numbers, and a settle queues and takes a computation for every run).
///
/// A height queued at for the first time takes the room of the list just below the
/// lowest (empty, as every list below it is): a settle climbs the heights of a deep
/// graph, and a new graph (a charm starting) would otherwise allocate a list at each.
#[derive(Default)]
pub(super) struct Queue {
    heights: Vec<VecDeque<ComputationId>>,
    /// No height below this one holds a computation.
    lowest: usize,
    len: usize,
}

impl Queue {
    #[inline]
    pub fn push(&mut self, height: u32, id: ComputationId) {
        let height = height as usize;
        if self.heights.get(height).is_none_or(|list| list.capacity() == 0) {
            self.make_room(height);
        }
        self.heights[height].push_back(id);
        if self.len == 0 || height < self.lowest {
            self.lowest = height;
        }
        self.len += 1;
    }

    /// Makes a list for `height`, in the room of an empty one where there is one.
    #[cold]
    fn make_room(&mut self, height: usize) {
        if height >= self.heights.len() {
            self.heights.resize_with(height + 1, VecDeque::new);
        }
        if let Some(below) = self.lowest.checked_sub(1).filter(|below| *below != height) {
            self.heights.swap(below, height);
        }
    }

    /// The next two computations [`Queue::pop`] would give, heights staying as they
    /// are.
    pub fn next_two(&self) -> Option<(ComputationId, ComputationId)> {
        if self.len < 2 {
            return None;
        }
        let mut lists = self.heights[self.lowest..].iter().filter(|list| !list.is_empty());
        let first = lists.next()?;
        let then = match first.get(1) {
            Some(id) => *id,
            None => *lists.next()?.front()?,
        };
        Some((*first.front()?, then))
    }

    /// The computation queued first at the lowest height, and that height.
    #[inline]
    pub fn pop(&mut self) -> Option<(u32, ComputationId)> {
        if self.len == 0 {
            return None;
        }
        while self.heights[self.lowest].is_empty() {
            self.lowest += 1;
        }
        let id = self.heights[self.lowest].pop_front()?;
        self.len -= 1;
        Some((self.lowest as u32, id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_gives_the_lowest_height_first_in_the_order_queued() {
        let mut q = Queue::default();
        let id = |n| ComputationId::new(n, 0);
        q.push(2, id(1));
        q.push(1, id(2));
        q.push(2, id(3));
        assert_eq!(q.pop(), Some((1, id(2))));
        assert_eq!(q.pop(), Some((2, id(1))), "queued first at its height");
        q.push(0, id(4));
        assert_eq!(q.pop(), Some((0, id(4))), "a lower height queued later comes first");
        assert_eq!(q.pop(), Some((2, id(3))));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn the_next_two_are_those_pop_gives_across_heights() {
        let mut q = Queue::default();
        let id = |n| ComputationId::new(n, 0);
        q.push(3, id(1));
        assert_eq!(q.next_two(), None, "one queued");
        q.push(1, id(2));
        q.push(3, id(3));
        assert_eq!(q.next_two(), Some((id(2), id(1))), "the lowest height, then the next one up");
        q.push(1, id(4));
        assert_eq!(q.next_two(), Some((id(2), id(4))), "both at the lowest height");
        let popped: Vec<_> = std::iter::from_fn(|| q.pop().map(|(_, id)| id)).take(2).collect();
        assert_eq!(popped, [id(2), id(4)]);
        assert_eq!(q.next_two(), Some((id(1), id(3))));
    }

    #[test]
    fn a_height_reached_for_the_first_time_takes_the_room_of_one_left_behind() {
        let mut q = Queue::default();
        let id = |n| ComputationId::new(n, 0);
        // A climb: each computation taken queues one a height up.
        q.push(0, id(0));
        assert_eq!(q.pop(), Some((0, id(0))));
        q.push(1, id(1));
        assert_eq!(q.pop(), Some((1, id(1))));
        let room = q.heights[0].capacity();
        assert!(room > 0);
        q.push(2, id(2));
        assert_eq!((q.heights[0].capacity(), q.heights[2].capacity()), (0, room), "height 0's room moved up");
        q.push(0, id(3));
        assert_eq!(q.pop(), Some((0, id(3))), "a height whose room moved is queued at again");
        assert_eq!(q.pop(), Some((2, id(2))));
        assert_eq!(q.pop(), None);
    }
}
