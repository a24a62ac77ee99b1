//! KIP-868 metadata transactions as the controller replays them (Kafka's
//! `OffsetControlManager`): records between `BeginTransactionRecord` and `EndTransactionRecord`
//! apply as usual, and `AbortTransactionRecord` reverts the state to what it was before the
//! `BeginTransactionRecord` (Kafka reverts its timeline snapshot at `transactionStartOffset - 1`).
//!
//! The controller's images follow every record, in or out of a transaction (a transaction's own
//! later records build on its earlier ones); the loader, not the controller, keeps an open
//! transaction from being published.

use krust_metadata::records::MetadataRecord;
use krust_metadata::{ApiMessageAndVersion, MetadataDelta, MetadataImage, MetadataProvenance};
use tracing::warn;

/// An open transaction: where it began and the state just before it.
#[derive(Debug, Clone)]
pub(super) struct OpenTransaction {
    /// Offset of the `BeginTransactionRecord`.
    pub start_offset: i64,
    /// The image before the transaction (what an abort returns to).
    pub image_before: MetadataImage,
}

/// The image after replaying `records` (the first at `base_offset`, written in `epoch`) onto
/// `image`, with `transaction` updated; `Ok(true)` in the second place when an abort reverted
/// part of the state (callers rebuild what they derived from records).
///
/// `on_record(offset, record)` sees every record that was applied (markers included), in
/// order, so callers can keep derived state in step.
///
/// # Errors
/// A record that does not fit the image.
pub(super) fn replay_records(
    image: &MetadataImage,
    transaction: &mut Option<OpenTransaction>,
    base_offset: i64,
    epoch: i32,
    records: &[ApiMessageAndVersion],
    mut on_record: impl FnMut(i64, &MetadataRecord),
) -> Result<(MetadataImage, bool), krust_metadata::ReplayError> {
    let mut current = image.clone();
    let mut delta = MetadataDelta::new(&current);
    let mut touched = false;
    let mut aborted = false;
    for (i, record) in records.iter().enumerate() {
        let offset = base_offset + i64::try_from(i).unwrap_or(i64::MAX);
        match &record.record {
            MetadataRecord::BeginTransaction(_) => {
                if touched {
                    current = delta.apply(MetadataProvenance::new(offset - 1, epoch, 0));
                    delta = MetadataDelta::new(&current);
                    touched = false;
                }
                if let Some(open) = transaction {
                    warn!(
                        offset,
                        open_at = open.start_offset,
                        "BeginTransactionRecord inside an open transaction"
                    );
                }
                *transaction = Some(OpenTransaction {
                    start_offset: offset,
                    image_before: current.clone(),
                });
            }
            MetadataRecord::EndTransaction(_) => {
                if transaction.take().is_none() {
                    warn!(offset, "EndTransactionRecord outside a transaction");
                }
            }
            MetadataRecord::AbortTransaction(_) => match transaction.take() {
                Some(open) => {
                    current = open.image_before;
                    delta = MetadataDelta::new(&current);
                    touched = false;
                    aborted = true;
                }
                None => warn!(offset, "AbortTransactionRecord outside a transaction"),
            },
            other => {
                delta.replay(other)?;
                touched = true;
            }
        }
        on_record(offset, &record.record);
    }
    let last = base_offset + i64::try_from(records.len()).unwrap_or(i64::MAX) - 1;
    let provenance = MetadataProvenance::new(last, epoch, 0);
    let image = if touched {
        delta.apply(provenance)
    } else {
        current.provenance = provenance;
        current
    };
    Ok((image, aborted))
}
