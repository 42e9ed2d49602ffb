from twisted.application.service import ServiceMaker

objstore = ServiceMaker(
    "objstore", "objstore.daemon", "S3-compatible object store daemon", "objstore"
)
