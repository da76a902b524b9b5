"""Server backend: a Qdrant server (single node or distributed) through ``qdrant-client``.

Each logical collection is an alias (``{prefix}_{name}``) pointing at a physical
collection (``{prefix}_{name}__{stamp}``), so ``kar kb reindex`` can build a new one and
swap the alias atomically.  Collections are created with the shard, replication and
write-consistency settings from config, so a Qdrant cluster works unchanged.  The
embedder that built a collection is kept in the collection's metadata.

``location=":memory:"`` or ``path=...`` selects qdrant-client's local mode, which the
congruence tests use when no server is configured.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from culturebase.settings import setting_default
from culturebase.store.base import Backend, Collection, CollectionSpec, EmbedderInfo, Nearest, PayloadFilter, PointRecord
from culturebase.store.base import ScoredRecord, SparseVec, StoreError, StoreNotFoundError, check_embedder, point_uuid
from culturebase.store.layout import OLD_LAYOUT_HELP, LayoutPolicy, StoreLayout, server_vector_params
from culturebase.store.params import PARAMS
from culturebase.store.translate import CLIENT, collection_meta, paged, payload_selection, point_from_record, scored
from culturebase.store.translate import sparse_by_id, vectors_by_id, with_meta


def _models() -> Any:
    return CLIENT.models


class ServerCollection(Collection):
    """A collection on a Qdrant server, addressed by its alias."""

    def __init__(
        self, client: Any, alias: str, spec: CollectionSpec, embedder: EmbedderInfo, write_wait: bool = True,
        hnsw_ef: int = setting_default("hnsw_ef"), layout: StoreLayout | None = None, read_only: str | None = None,
    ) -> None:
        super().__init__(spec, embedder, hnsw_ef, layout, read_only)
        self._client = client
        self.alias = alias
        self._wait = write_wait

    def begin_bulk(self) -> None:
        """Switch indexing off (indexing_threshold=0) while a bulk import writes."""
        self._client.update_collection(self.alias, optimizers_config=_models().OptimizersConfigDiff(indexing_threshold=0))

    def end_bulk(self) -> None:
        """Restore the indexing threshold: the server then builds the HNSW graphs once, in the background."""
        self._client.update_collection(
            self.alias, optimizers_config=_models().OptimizersConfigDiff(indexing_threshold=PARAMS.server_indexing_threshold_kb)
        )

    def scroll_points(self, batch: int = 256) -> Iterator[PointRecord]:
        names = list(self.spec.dense) + list(self.spec.sparse)
        pages = paged(lambda offset: self._client.scroll(self.alias, limit=batch, offset=offset, with_payload=True, with_vectors=names))
        for r in pages:
            yield point_from_record(r.payload, r.vector, self.spec)

    def upsert(self, points: Sequence[PointRecord]) -> None:
        if not points:
            return
        self._writable()
        structs = CLIENT.points(points, self.spec, self.embedder)
        self._client.upsert(self.alias, points=structs, wait=self._wait)

    def delete(self, ids: Sequence[str]) -> None:
        if ids:
            self._writable()
            m = _models()
            self._client.delete(self.alias, points_selector=m.PointIdsList(points=[point_uuid(i) for i in ids]), wait=self._wait)

    def retrieve(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """Payloads of the given ids that exist, in the given order (read every time: other processes write
        to a server, so no payload is cached here as the embedded backend does)."""
        if not ids:
            return []
        records = self._client.retrieve(self.alias, ids=[point_uuid(i) for i in ids], with_payload=True, with_vectors=False)
        by_id = {r.payload["_id"]: r.payload for r in records if r.payload}
        return [by_id[i] for i in ids if i in by_id]

    def retrieve_sparse(self, ids: Sequence[str], vector_name: str) -> dict[str, SparseVec]:
        if not ids:
            return {}
        records = self._client.retrieve(
            self.alias, ids=[point_uuid(i) for i in ids], with_payload=["_id"], with_vectors=[vector_name]
        )
        return sparse_by_id(records, vector_name)

    def retrieve_vectors(self, ids: Sequence[str], vector_names: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
        if not ids or not vector_names:
            return {}
        records = self._client.retrieve(
            self.alias, ids=[point_uuid(i) for i in ids], with_payload=["_id"], with_vectors=list(vector_names)
        )
        return vectors_by_id(records, vector_names)

    def count(self, flt: PayloadFilter | None = None) -> int:
        return int(self._client.count(self.alias, count_filter=CLIENT.filter(flt), exact=True).count)

    def scroll(self, batch: int = 256, flt: PayloadFilter | None = None) -> Iterator[dict[str, Any]]:
        client_filter = CLIENT.filter(flt)
        pages = paged(
            lambda offset: self._client.scroll(
                self.alias, scroll_filter=client_filter, limit=batch, offset=offset, with_payload=True, with_vectors=False
            )
        )
        for r in pages:
            yield r.payload

    def nearest(self, query: Nearest) -> list[ScoredRecord]:
        if query.sparse:
            vector, params = CLIENT.sparse(query.vector), None  # type: ignore[arg-type]
        else:
            vector, params = query.vector, self._search_params(_models(), query)
        res = self._client.query_points(
            self.alias,
            query=vector,
            using=query.vector_name,
            limit=query.limit,
            query_filter=CLIENT.filter(query.flt),
            search_params=params,
            with_payload=payload_selection(query.payload_keys),
        )
        return [scored(h) for h in res.points]



class ServerBackend(Backend):
    """Collections on a Qdrant server (or qdrant-client's local mode for tests)."""

    kind = "server"

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        prefix: str = "culturebase",
        shards: int = 1,
        replication_factor: int = 1,
        write_consistency: int = 1,
        location: str | None = None,
        timeout: int = 60,
        hnsw_ef: int = setting_default("hnsw_ef"),
        hnsw_m: int = setting_default("hnsw_m"),
        hnsw_ef_construct: int = setting_default("hnsw_ef_construct"),
        layout_policy: LayoutPolicy | None = None,
    ) -> None:
        from qdrant_client import QdrantClient

        super().__init__(hnsw_ef, hnsw_m, hnsw_ef_construct, layout_policy)
        self.url = url or location or ":memory:"
        self.prefix = prefix
        self.shards = shards
        self.replication_factor = replication_factor
        self.write_consistency = write_consistency
        if url:
            self._client = QdrantClient(url=url, api_key=api_key, timeout=timeout)
        else:
            self._client = QdrantClient(location=location or ":memory:")
        self._open: dict[str, ServerCollection] = {}

    def describe(self) -> str:
        return f"Qdrant server at {self.url}"

    def _alias(self, name: str) -> str:
        return f"{self.prefix}_{name}"

    def _physical(self, alias: str) -> str | None:
        for a in self._client.get_aliases().aliases:
            if a.alias_name == alias:
                return a.collection_name
        return None

    def collection_info(self, name: str) -> dict[str, Any] | None:
        physical = self._physical(self._alias(name))
        if physical is None:
            return None
        info = self._client.get_collection(physical)
        return dict(info.config.metadata or {})

    def set_collection_meta(self, name: str, key: str, value: Any) -> None:
        physical = self._physical(self._alias(name))
        if physical is None:
            raise StoreError(f"no collection {name!r} on {self.describe()}")
        meta = dict(self._client.get_collection(physical).config.metadata or {})
        with_meta(meta, key, value)
        self._client.update_collection(physical, metadata=meta)

    def _create_physical(self, spec: CollectionSpec, embedder: EmbedderInfo, layout: StoreLayout) -> str:
        m = _models()
        physical = f"{self._alias(spec.name)}__{time.strftime('%Y%m%d%H%M%S')}{time.time_ns() % 1000000:06d}"
        self._client.create_collection(
            physical,
            vectors_config=server_vector_params(m, layout, spec.dense, embedder.dim, self.hnsw_ef_construct),
            sparse_vectors_config={
                n: m.SparseVectorParams(modifier=m.Modifier.IDF if n in spec.idf_sparse else None) for n in spec.sparse
            }
            or None,
            hnsw_config=m.HnswConfigDiff(m=self.hnsw_m, ef_construct=self.hnsw_ef_construct, full_scan_threshold=PARAMS.exact_search_kb),
            on_disk_payload=layout.on_disk,
            shard_number=self.shards,
            replication_factor=self.replication_factor,
            write_consistency_factor=self.write_consistency,
            metadata=collection_meta(spec, embedder, layout),
        )
        import warnings

        with warnings.catch_warnings():  # local mode warns that indexes have no effect there
            warnings.simplefilter("ignore", UserWarning)
            for field_name in spec.keyword_indexes:
                self._client.create_payload_index(physical, field_name=field_name, field_schema=m.PayloadSchemaType.KEYWORD)
        return physical

    def _point_alias(self, alias: str, physical: str, old: str | None) -> None:
        m = _models()
        ops: list[Any] = []
        if old is not None:
            ops.append(m.DeleteAliasOperation(delete_alias=m.DeleteAlias(alias_name=alias)))
        ops.append(m.CreateAliasOperation(create_alias=m.CreateAlias(collection_name=physical, alias_name=alias)))
        self._client.update_collection_aliases(change_aliases_operations=ops)

    def open_collection(
        self, spec: CollectionSpec, embedder: EmbedderInfo, create: bool = True, expected_points: int | None = None
    ) -> ServerCollection:
        alias = self._alias(spec.name)
        meta = self.collection_info(spec.name)
        read_only = None
        if meta is None:
            if not create:
                raise StoreNotFoundError(f"no collection {alias!r} on {self.url} yet: import entities first (kar kb import FILE)")
            layout: StoreLayout | None = self.layout_policy.choose(expected_points, spec.dense)
            assert layout is not None
            physical = self._create_physical(spec, embedder, layout)
            self._point_alias(alias, physical, None)
        else:
            check_embedder(spec.name, meta, embedder, self.url)
            layout = StoreLayout.from_meta(meta)
            if layout is None:
                read_only = f"collection {alias!r} on {self.url}: {OLD_LAYOUT_HELP}"
        coll = ServerCollection(self._client, alias, spec, embedder, hnsw_ef=self.hnsw_ef, layout=layout, read_only=read_only)
        self._open[spec.name] = coll
        return coll

    def drop_collection(self, name: str) -> None:
        alias = self._alias(name)
        physical = self._physical(alias)
        if physical is not None:
            self._client.delete_collection(physical)
        self._open.pop(name, None)

    def replace_collection(
        self, spec: CollectionSpec, embedder: EmbedderInfo, points: Iterator[Sequence[PointRecord]], expected_points: int | None = None
    ) -> ServerCollection:
        alias = self._alias(spec.name)
        old = self._physical(alias)
        layout = self.layout_policy.choose(expected_points, spec.dense)
        physical = self._create_physical(spec, embedder, layout)
        staging = ServerCollection(self._client, physical, spec, embedder, layout=layout)
        try:
            staging.begin_bulk()
            for batch in points:
                staging.upsert(batch)
            staging.end_bulk()
        except BaseException:
            self._client.delete_collection(physical)
            raise
        self._point_alias(alias, physical, old)
        if old is not None:
            self._client.delete_collection(old)
        self._open.pop(spec.name, None)
        return self.open_collection(spec, embedder, create=False)

    def close(self) -> None:
        self._open.clear()
        self._client.close()
