//! Broker lifecycle with the controller (Kafka's `BrokerLifecycleManager`):
//! BrokerRegistration (incarnation id, listeners, features, rack, log dirs), heartbeats every
//! `broker.heartbeat.interval.ms` carrying the current metadata offset, the
//! fenced/unfenced/shutting-down state the controller answers with, and controlled shutdown.
//!
//! CONTRACT (used by the `krust` binary): [`BrokerLifecycle::start`] registers and then
//! heartbeats in the background; [`BrokerLifecycle::set_metadata_offset`] is fed by the
//! metadata loader; [`BrokerLifecycle::state`] tells whether the broker is fenced;
//! [`BrokerLifecycle::controlled_shutdown`] resolves once the controller says
//! `shouldShutDown` (or the timeout passes).
