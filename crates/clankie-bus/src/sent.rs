//! Publishing in order without waiting for each ack: an ordered producer (the gateway's
//! ingest) sends each event in turn and awaits many acks at once.

use async_nats::jetstream;
use bytes::Bytes;
use clankie_proto::{Event, Subject};

use crate::{Bus, BusError, MsgId, Published, TraceContext, transient};

/// JetStream's ack of an event [`Bus::publish_sent`] sent, awaited later.
pub type Ack = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Published, BusError>> + Send>>;

impl Bus {
    /// Sends `event` on `subject` and returns without waiting for JetStream's ack: the future
    /// it gives waits for it. Events sent one after another on one connection are stored in
    /// that order, so an ordered producer sends each in turn and awaits many acks at once. An
    /// ack that fails transiently is retried as a whole publish (the msg id keeps it one).
    pub async fn publish_sent<E: Event>(&self, subject: &Subject, event: &E, msg_id: &MsgId) -> Result<Ack, BusError> {
        subject.check_payload::<E>()?;
        let (name, payload, id) = (subject.to_string(), Bytes::from(event.encode_to_vec()), msg_id.as_str().to_owned());
        // The current span's context travels with the event, so its consumer carries the trace on.
        let trace = TraceContext::current();
        let mut publish = jetstream::message::PublishMessage::build().payload(payload.clone()).message_id(id.as_str());
        for (header, value) in trace.headers() {
            publish = publish.header(header, value);
        }
        let sent = self.js.send_publish(name.clone(), publish).await;
        let bus = self.clone();
        Ok(Box::pin(async move {
            let acked = match sent {
                Ok(ack) => ack.await,
                Err(e) => Err(e),
            };
            match acked {
                Ok(ack) => Ok(Published { stream: ack.stream, sequence: ack.sequence, duplicate: ack.duplicate }),
                Err(e) if transient(e.kind()) => bus.publish_with(name, payload, id, trace).await,
                Err(e) => Err(BusError::Publish { subject: name, detail: e.to_string() }),
            }
        }))
    }
}
