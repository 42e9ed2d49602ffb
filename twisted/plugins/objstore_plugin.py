from twisted.application.service import ServiceMaker

objstore = ServiceMaker(
    "objstore", "objstore.service", "S3-compatible object store daemon", "objstore"
)
