//! The building blocks together, the way the `QuorumController` will use them: requests are
//! validated against a `MetadataImage`, every record is "committed" (given the next offset),
//! replayed into the image through a `MetadataDelta` and into the heartbeat manager, and the
//! next request sees the new image. Checks that every record krust-controller writes replays
//! cleanly into krust-metadata's image, and that the image ends up where Kafka's would.

use std::time::{Duration, Instant};

use kafka_protocol::messages::UpdateFeaturesRequest;
use kafka_protocol::messages::broker_registration_request::{Feature, Listener};
use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
use kafka_protocol::messages::{
    BrokerHeartbeatRequest, BrokerId, BrokerRegistrationRequest, UnregisterBrokerRequest,
};
use kafka_protocol::protocol::StrBytes;
use krust_controller::features::{FeatureContext, NodeFeatures, update_features};
use krust_controller::heartbeat::{BrokerControlState, BrokerHeartbeatManager, HeartbeatConfig};
use krust_controller::placement::StripedReplicaPlacer;
use krust_controller::producer_ids::ProducerIdControl;
use krust_controller::registration::{ImageClusterView, register_broker, unregister_broker};
use krust_metadata::records::{FeatureLevelRecord, MetadataRecord};
use krust_metadata::{
    ApiMessageAndVersion, MetadataDelta, MetadataImage, MetadataProvenance, MetadataVersion,
};
use rand::SeedableRng;
use rand::rngs::StdRng;
use uuid::Uuid;

const CLUSTER_ID: &str = "J8qXRwI-Qyi2G0guFTiuYw";

/// The log, the image and the heartbeat manager of one active controller.
struct Controller {
    image: MetadataImage,
    sessions: BrokerHeartbeatManager,
    next_offset: i64,
}

impl Controller {
    fn new(now: Instant) -> Self {
        let mut controller = Self {
            image: MetadataImage::empty(),
            sessions: BrokerHeartbeatManager::new(HeartbeatConfig::default()),
            next_offset: 0,
        };
        let bootstrap = FeatureLevelRecord::new(
            "metadata.version",
            MetadataVersion::IBP_3_8_IV0.feature_level(),
        );
        controller.commit(
            now,
            &[ApiMessageAndVersion::new(
                MetadataRecord::FeatureLevel(bootstrap),
                0,
            )],
        );
        controller.sessions.activate(now);
        controller
    }

    fn view(&self) -> ImageClusterView<'_> {
        ImageClusterView {
            image: &self.image,
            cluster_id: CLUSTER_ID,
            kraft_version: 0,
            zk_migration_enabled: false,
        }
    }

    /// Appends `records` as one batch: each is encoded (as the log would hold it), replayed
    /// into a delta and the heartbeat manager, and the delta applied.
    fn commit(&mut self, now: Instant, records: &[ApiMessageAndVersion]) {
        let mut delta = MetadataDelta::new(&self.image);
        for record in records {
            let bytes = record.encode().expect("encodable at its version");
            let decoded = ApiMessageAndVersion::decode(&bytes).expect("decodable");
            assert_eq!(&decoded, record, "round trip");
            delta
                .replay(&record.record)
                .expect("replays into the image");
            self.sessions.replay(now, &record.record, self.next_offset);
            self.next_offset += 1;
        }
        self.image = delta.apply(MetadataProvenance::new(self.next_offset - 1, 1, 0));
    }

    fn register(&mut self, now: Instant, broker_id: i32, rack: &'static str) -> i64 {
        let request = BrokerRegistrationRequest::default()
            .with_broker_id(BrokerId(broker_id))
            .with_cluster_id(StrBytes::from_static_str(CLUSTER_ID))
            .with_incarnation_id(Uuid::from_u64_pair(
                42,
                u64::try_from(broker_id).unwrap_or(0),
            ))
            .with_listeners(vec![
                Listener::default()
                    .with_name(StrBytes::from_static_str("PLAINTEXT"))
                    .with_host(StrBytes::from_static_str("localhost"))
                    .with_port(9092)
                    .with_security_protocol(0),
            ])
            .with_features(vec![
                Feature::default()
                    .with_name(StrBytes::from_static_str("metadata.version"))
                    .with_min_supported_version(1)
                    .with_max_supported_version(21),
            ])
            .with_rack(Some(StrBytes::from_static_str(rack)))
            .with_log_dirs(vec![Uuid::from_u64_pair(
                7,
                u64::try_from(broker_id).unwrap_or(0) + 1000,
            )]);
        let epoch = self.next_offset;
        let outcome = register_broker(&self.view(), &self.sessions, now, &request, epoch)
            .expect("valid registration");
        self.commit(now, &outcome.records);
        outcome.broker_epoch
    }

    fn heartbeat(&mut self, now: Instant, broker_id: i32, epoch: i64) -> BrokerControlState {
        let request = BrokerHeartbeatRequest::default()
            .with_broker_id(BrokerId(broker_id))
            .with_broker_epoch(epoch)
            .with_current_metadata_offset(self.next_offset - 1);
        let outcome = self
            .sessions
            .handle_heartbeat(now, &request, self.image.features.metadata_version, || {
                false
            })
            .expect("current epoch");
        self.commit(now, &outcome.records);
        outcome.to
    }
}

#[test]
fn brokers_register_unfence_get_replicas_and_producer_ids_upgrade_then_leave() {
    let t0 = Instant::now();
    let mut controller = Controller::new(t0);
    let racks = ["a", "a", "b", "b", "c"];
    let mut epochs = Vec::new();
    for (id, rack) in (1..=5).zip(racks) {
        epochs.push((id, controller.register(t0, id, rack)));
    }
    for &(id, epoch) in &epochs {
        let broker = controller.image.cluster.broker(id).expect("registered");
        assert!(broker.fenced, "a new broker starts fenced");
        assert_eq!(broker.epoch, epoch);
    }
    for &(id, epoch) in &epochs {
        assert_eq!(
            controller.heartbeat(t0, id, epoch),
            BrokerControlState::Unfenced
        );
    }
    assert!(controller.image.cluster.brokers.values().all(|b| !b.fenced));

    let image = controller.image.clone();
    let usable = controller
        .sessions
        .usable_brokers(|id| image.cluster.broker(id).and_then(|b| b.rack.clone()));
    assert_eq!(usable.len(), 5);
    let placements = StripedReplicaPlacer::new(StdRng::seed_from_u64(1))
        .place(30, 3, &usable)
        .expect("placed");
    for partition in &placements {
        let racks: std::collections::BTreeSet<_> = partition
            .iter()
            .map(|&b| image.cluster.broker(b).and_then(|r| r.rack.clone()))
            .collect();
        assert_eq!(racks.len(), 3, "{partition:?}");
    }

    let mut producer_ids = ProducerIdControl::from_image(&controller.image.producer_ids);
    let (block, records) = producer_ids
        .generate_next_block(&controller.view(), 3, epochs[2].1)
        .expect("current epoch");
    controller.commit(t0, &records);
    if let MetadataRecord::ProducerIds(r) = &records[0].record {
        producer_ids.replay(r).expect("forward");
    }
    assert_eq!(block.first_producer_id, 0);
    assert_eq!(controller.image.producer_ids.next_producer_id, 1000);

    // metadata.version 3.8-IV0 → 3.9-IV0, which every broker supports.
    let finalized = std::collections::BTreeMap::new();
    let brokers = NodeFeatures::brokers_of(&controller.image.cluster);
    let context = FeatureContext {
        metadata_version: controller.image.features.metadata_version,
        finalized: &finalized,
        zk_migration_state: controller.image.features.zk_migration_state,
        local_controller_id: 3000,
        unstable_feature_versions_enable: false,
        brokers: &brokers,
        controllers: &[],
    };
    let upgrade = UpdateFeaturesRequest::default().with_feature_updates(vec![
        FeatureUpdateKey::default()
            .with_feature(StrBytes::from_static_str("metadata.version"))
            .with_max_version_level(21)
            .with_upgrade_type(1),
    ]);
    let outcome = update_features(&context, &upgrade, 1);
    assert_eq!(outcome.results["metadata.version"], Ok(()));
    controller.commit(t0, &outcome.records);
    assert_eq!(
        controller.image.features.metadata_version,
        MetadataVersion::IBP_3_9_IV0
    );

    // Broker 5 goes silent and is fenced once its session expires.
    let later = t0 + Duration::from_secs(8);
    for &(id, epoch) in &epochs[..4] {
        controller.heartbeat(later, id, epoch);
    }
    let expired = controller
        .sessions
        .handle_timeout(t0 + Duration::from_secs(9), MetadataVersion::IBP_3_9_IV0);
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].broker_id, 5);
    controller.commit(later, &expired[0].records);
    assert!(
        controller
            .image
            .cluster
            .broker(5)
            .expect("still registered")
            .fenced
    );

    // And is then unregistered by an admin.
    let (records, _) = unregister_broker(
        &controller.view(),
        &UnregisterBrokerRequest::default().with_broker_id(BrokerId(5)),
    )
    .expect("registered");
    controller.commit(later, &records);
    assert!(controller.image.cluster.broker(5).is_none());
    assert_eq!(controller.sessions.state(5), None);
}
