//! Metrics on a Prometheus endpoint while a small workload runs.
//!
//! ```text
//! cargo run --example metrics            # runs the workload, prints the endpoint's page, exits
//! cargo run --example metrics -- --serve # then keeps serving http://127.0.0.1:PORT/metrics
//! ```
//!
//! zk-recipes records through the `metrics` facade; the application picks the exporter. Here it
//! is `metrics-exporter-prometheus`, rendered on a tiny HTTP endpoint. It starts a throwaway
//! ZooKeeper unless `ZK_CONNECT` is set.

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zk_recipes::{InterProcessMutex, InterProcessSemaphore, LockOptions, Session};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let serve_forever = std::env::args().any(|a| a == "--serve");
    let prometheus = PrometheusBuilder::new().install_recorder()?;

    // The endpoint: GET anything, get the page.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let page = prometheus.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let body = page.render();
            tokio::spawn(async move {
                let mut request = [0u8; 1024];
                let _ = socket.read(&mut request).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(body.as_bytes()).await;
            });
        }
    });
    println!("metrics at http://{addr}/metrics");

    let (_zk, connect) = match std::env::var("ZK_CONNECT") {
        Ok(connect) => (None, connect),
        Err(_) => {
            let zk = zk_testcluster::ZkCluster::standalone().await?;
            let connect = zk.connect_string();
            (Some(zk), connect)
        }
    };
    let session = Session::connect(&connect, Duration::from_secs(10)).await?;

    // The workload: 4 tasks take per-order locks (one role, many paths), and a semaphore.
    let mut tasks = Vec::new();
    for worker in 0..4 {
        let session = session.clone();
        tasks.push(tokio::spawn(async move {
            for order in 0..10 {
                let path = format!("/shop/orders/{}", order % 3);
                let lock = InterProcessMutex::with_options(
                    &session,
                    &path,
                    LockOptions::new().metrics_role("orders"),
                )?;
                let guard = lock.acquire().await?;
                tokio::time::sleep(Duration::from_millis(2)).await;
                guard.release().await?;
            }
            let slots = InterProcessSemaphore::with_options(
                &session,
                "/shop/packers",
                2,
                LockOptions::new().metrics_role("packers"),
            )?;
            let lease = slots.acquire().await?;
            tokio::time::sleep(Duration::from_millis(5)).await;
            lease.release().await?;
            Ok::<_, zk_recipes::Error>(worker)
        }));
    }
    for task in tasks {
        task.await??;
    }

    // Read our own endpoint, as Prometheus would.
    let mut socket = tokio::net::TcpStream::connect(addr).await?;
    socket.write_all(b"GET /metrics HTTP/1.1\r\nhost: localhost\r\n\r\n").await?;
    let mut page = String::new();
    socket.read_to_string(&mut page).await?;
    for line in page
        .lines()
        .filter(|l| l.starts_with("zk_recipes_acquires_total") || l.starts_with("zk_recipes_session"))
    {
        println!("{line}");
    }
    if !page.contains(r#"zk_recipes_acquires_total{recipe="mutex",role="orders",outcome="acquired"} 40"#) {
        return Err("the endpoint does not show the 40 order-lock acquisitions".into());
    }
    if serve_forever {
        println!("serving; Ctrl-C to stop");
        tokio::signal::ctrl_c().await?;
    }
    session.close().await;
    Ok(())
}
