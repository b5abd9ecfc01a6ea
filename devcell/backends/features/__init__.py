"""Dev Container Features (spec.features): a feature is a folder holding
`devcontainer-feature.json` and `install.sh`, found by an OCI reference (an artifact in a
registry), a local folder beside the manifest, or an https tarball. DevCell resolves each one
to a folder it owns (cached by digest under the state directory), orders them as the
specification says, and writes a build context that layers each feature's install.sh on the
cell's base image; the controller builds it through spec.build's build path.

manifests/feature_refs.py says what a reference is; metadata.py reads a feature's
devcontainer-feature.json and its options, order.py orders them, fetch.py and registry.py
bring remote features in, unpack.py extracts their tarballs safely, context.py writes the
build context.
"""
