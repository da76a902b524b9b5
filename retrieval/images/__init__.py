"""The image route: perceptual hashes, local features and their verification, the optional learned
embedder, and the images of imported records."""
