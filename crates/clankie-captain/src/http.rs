//! The captain's scrape endpoint: `/metrics` (Prometheus text) and `/healthz`.

use std::net::SocketAddr;
use std::sync::OnceLock;

use axum::Router;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Installs the process-wide Prometheus recorder (once) and returns its handle.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            // Another recorder already installed (a test harness, say) keeps working; ours then renders nothing.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

/// Serves `/metrics` and `/healthz` until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, handle: PrometheusHandle) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(move || std::future::ready(handle.render())))
        .route("/healthz", get(|| std::future::ready("ok")));
    axum::serve(listener, app).await
}

/// Binds the scrape endpoint.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}
