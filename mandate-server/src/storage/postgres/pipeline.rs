//! Pipelines: several statements of one connection sent at once (tokio-postgres sends a
//! request when its future is first polled), their answers read in order.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Runs futures together, each first polled in order, so that their requests go to the
/// connection in that order (tokio-postgres sends a request when its future is first
/// polled); yields their outputs in the same order.
pub(super) struct InOrder<'a, T> {
    futures: Vec<Option<Pin<Box<dyn Future<Output = T> + Send + 'a>>>>,
    outputs: Vec<Option<T>>,
}

impl<'a, T> InOrder<'a, T> {
    pub(super) fn new(futures: Vec<Pin<Box<dyn Future<Output = T> + Send + 'a>>>) -> Self {
        let outputs = futures.iter().map(|_| None).collect();
        Self {
            futures: futures.into_iter().map(Some).collect(),
            outputs,
        }
    }
}

impl<T: Unpin> Future for InOrder<'_, T> {
    type Output = Vec<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Vec<T>> {
        let this = &mut *self;
        let mut pending = false;
        for (slot, output) in this.futures.iter_mut().zip(this.outputs.iter_mut()) {
            if let Some(future) = slot {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => {
                        *output = Some(value);
                        *slot = None;
                    }
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            return Poll::Pending;
        }
        Poll::Ready(this.outputs.iter_mut().filter_map(Option::take).collect())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::pin::Pin;

    /// Every future is first polled in the order given, whatever order they finish in.
    #[tokio::test]
    async fn futures_are_first_polled_in_order_and_answered_in_order() {
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let futures: Vec<Pin<Box<dyn Future<Output = usize> + Send>>> = (0..40usize)
            .map(|i| {
                let order = order.clone();
                Box::pin(async move {
                    order.lock().unwrap().push(i);
                    // Later ones finish first.
                    tokio::time::sleep(std::time::Duration::from_millis(40 - i as u64)).await;
                    i
                }) as Pin<Box<dyn Future<Output = usize> + Send>>
            })
            .collect();
        let outputs = InOrder::new(futures).await;
        assert_eq!(outputs, (0..40).collect::<Vec<_>>());
        assert_eq!(*order.lock().unwrap(), (0..40).collect::<Vec<_>>());
    }
}
