# objstore container image: the same layout as the Debian package (scripts/build-deb).
#   /opt/objstore              virtualenv with the daemon (twistd) and the objstore command
#   /etc/objstore/objstore.toml the configuration (mount your own over it)
#   /var/lib/objstore          data (a volume), owned by the non-root user objstore
# Build:  docker build -t objstore .   (or podman build; buildah bud: docs/PACKAGING.md)
# Run:    docker run -d --name objstore -p 9000:9000 -v objstore-data:/var/lib/objstore \
#           --stop-timeout 90 objstore
# The first start prints the generated root credential once: docker logs objstore. To pin
# it instead, pass -e OBJSTORE_ROOT_ACCESS_KEY=... -e OBJSTORE_ROOT_SECRET_KEY=...
# SIGTERM drains for [server] drain_timeout_seconds (30), then in-flight requests get as
# long again: docker's default stop timeout (10 s) would cut that short, hence --stop-timeout.

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY . /src
RUN python -m venv /opt/objstore \
 && /opt/objstore/bin/pip install --no-cache-dir --disable-pip-version-check /src \
 && rm -f /opt/objstore/lib/python3.11/site-packages/twisted/plugins/dropin.cache

FROM python:3.11-slim-bookworm
COPY --from=build /opt/objstore /opt/objstore
COPY etc/objstore.toml /etc/objstore/objstore.toml
COPY man/objstore.1 /usr/share/man/man1/objstore.1
COPY man/objstore.8 /usr/share/man/man8/objstore.8
# Twisted's plugin cache is written now, as root: the objstore user can not write there.
RUN /opt/objstore/bin/python -c \
      'from twisted.plugin import IPlugin, getPlugins; list(getPlugins(IPlugin))' \
 && useradd --system --user-group --home-dir /var/lib/objstore --no-create-home \
      --shell /usr/sbin/nologin objstore \
 && install -d -o objstore -g objstore -m 0700 /var/lib/objstore \
 && ln -s /opt/objstore/bin/objstore /usr/local/bin/objstore
USER objstore
WORKDIR /var/lib/objstore
VOLUME /var/lib/objstore
EXPOSE 9000
STOPSIGNAL SIGTERM
# /admin/health answers 200 when serving and 503 while draining (urlopen raises on both
# an error status and a refused connection).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["/opt/objstore/bin/python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9000/admin/health', timeout=4)"]
ENTRYPOINT ["/opt/objstore/bin/twistd", "-n", "--pidfile=", "objstore"]
CMD ["--config", "/etc/objstore/objstore.toml"]
