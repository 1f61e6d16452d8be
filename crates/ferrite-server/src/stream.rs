//! A client connection's byte stream: plain TCP, or TLS over it. One concrete type (rather than
//! generics through every connection function) keeps the connection code the same for both.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

#[derive(Debug)]
pub(crate) enum ClientStream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl ClientStream {
    pub fn peer_addr(&self) -> io::Result<std::net::SocketAddr> {
        match self {
            ClientStream::Plain(stream) => stream.peer_addr(),
            ClientStream::Tls(stream) => stream.get_ref().0.peer_addr(),
        }
    }

    /// The TCP socket, if the stream is plain: bytes written to it reach the client as they are.
    pub fn plain(&self) -> Option<&TcpStream> {
        match self {
            ClientStream::Plain(stream) => Some(stream),
            ClientStream::Tls(_) => None,
        }
    }

    /// The fingerprint (`ferrite_auth::secret::certificate_fingerprint`) of the certificate the
    /// client presented in the TLS handshake, which the server's client CA verified; `None` on
    /// plain TCP or without a client certificate.
    pub fn peer_certificate_fingerprint(&self) -> Option<String> {
        match self {
            ClientStream::Plain(_) => None,
            ClientStream::Tls(stream) => {
                let leaf = stream.get_ref().1.peer_certificates()?.first()?;
                Some(ferrite_auth::secret::certificate_fingerprint(leaf))
            }
        }
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            ClientStream::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Plain(stream) => Pin::new(stream).poll_write(cx, buf),
            ClientStream::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(stream) => Pin::new(stream).poll_flush(cx),
            ClientStream::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(stream) => Pin::new(stream).poll_shutdown(cx),
            ClientStream::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }
}
