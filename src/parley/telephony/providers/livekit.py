"""LiveKit SIP through ``livekit-api``: trunks, dispatch rules and outbound SIP participants.

``livekit-api`` talks Twirp over aiohttp. Its ``LiveKitAPI`` accepts our own ``aiohttp.ClientSession``,
so Parley hands it one whose connector applies the same :class:`~parley.kit.outbound.OutboundPolicy`
as every other outbound call: each address a host resolves to (IP literals included) is vetted right
before the socket is opened, redirects are refused, proxies from the environment are ignored, and the
library's cloud fail-over (which would fetch other origins from ``/settings/regions``) is switched off.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import aiohttp
from aiohttp.abc import ResolveResult
from aiohttp.tracing import Trace
from livekit import api
from livekit.api.twirp_client import ServerError
from livekit.protocol import room, sip

from parley.kit.outbound import OutboundPolicy
from parley.providers.catalog import LiveKitConfig
from parley.telephony.providers import ProviderFailure

PROVIDER = "LiveKit"


class BlockedAddress(aiohttp.ClientConnectionError):
    """The LiveKit URL resolves to an address outbound calls may not reach."""


class GuardedConnector(aiohttp.TCPConnector):
    """A TCP connector that refuses every address the outbound policy does not allow."""

    def __init__(self, policy: OutboundPolicy, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._policy = policy

    async def _resolve_host(
        self, host: str, port: int, traces: Sequence[Trace] | None = None
    ) -> list[ResolveResult]:
        results = await super()._resolve_host(host, port, traces)
        for result in results:
            address = ipaddress.ip_address(str(result["host"]).split("%", 1)[0])
            if not self._policy.address_allowed(host, address):
                raise BlockedAddress(
                    f"{host} resolves to a non-public address ({address}); outbound calls may only reach "
                    "public addresses unless PARLEY_OUTBOUND_ALLOWLIST allows it"
                )
        if not results:
            raise BlockedAddress(f"{host} does not resolve to any address")
        return results


async def _refuse_redirect(
    session: aiohttp.ClientSession, context: Any, params: aiohttp.TraceRequestRedirectParams
) -> None:
    raise BlockedAddress("LiveKit answered with a redirect; redirects are not followed")


def guarded_session(policy: OutboundPolicy, timeout: float) -> aiohttp.ClientSession:
    trace = aiohttp.TraceConfig()
    trace.on_request_redirect.append(_refuse_redirect)
    return aiohttp.ClientSession(
        connector=GuardedConnector(policy, limit=20),
        timeout=aiohttp.ClientTimeout(total=timeout),
        trust_env=False,
        trace_configs=[trace],
    )


class LiveKitSip:
    """``async with LiveKitSip(config, policy) as lk: await lk.list_inbound_trunks()``.

    Every failure is a :class:`ProviderFailure` whose reason names the cause (LiveKit's own error
    message for a refused request) and never contains a secret.
    """

    def __init__(self, config: LiveKitConfig, policy: OutboundPolicy, *, timeout: float = 10.0) -> None:
        self.config = config
        self.policy = policy
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        self._api: api.LiveKitAPI | None = None

    async def __aenter__(self) -> LiveKitSip:
        self._session = guarded_session(self.policy, self.timeout)
        self._api = api.LiveKitAPI(
            self.config.url,
            self.config.api_key,
            self.config.api_secret.get_secret_value(),
            session=self._session,
            failover=False,
        )
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._session is not None:
            await self._session.close()

    async def _call(self, method: str, *args: Any, service: str = "sip", **kwargs: Any) -> Any:
        assert self._api is not None, "use LiveKitSip as an async context manager"
        try:
            return await getattr(getattr(self._api, service), method)(*args, **kwargs)
        except ServerError as exc:
            reason = f"{exc.message or 'request refused'} ({exc.code})"
            sip_status = exc.metadata.get("sip_status_code") if exc.metadata else None
            if sip_status:  # a dialled line answered with a SIP failure (486 Busy Here...)
                reason = f"{reason}; SIP {sip_status} {exc.metadata.get('sip_status') or ''}".strip()
            raise ProviderFailure(PROVIDER, reason[:300], status=exc.status) from exc
        except BlockedAddress as exc:
            raise ProviderFailure(PROVIDER, str(exc)) from exc
        except TimeoutError as exc:
            raise ProviderFailure(PROVIDER, "the LiveKit server did not answer in time") from exc
        except aiohttp.ClientError as exc:
            raise ProviderFailure(PROVIDER, "the LiveKit server cannot be reached") from exc

    # --- trunks ----------------------------------------------------------------------------------

    async def list_inbound_trunks(self) -> list[sip.SIPInboundTrunkInfo]:
        response = await self._call("list_inbound_trunk", sip.ListSIPInboundTrunkRequest())
        return list(response.items)

    async def list_outbound_trunks(self) -> list[sip.SIPOutboundTrunkInfo]:
        response = await self._call("list_outbound_trunk", sip.ListSIPOutboundTrunkRequest())
        return list(response.items)

    async def create_inbound_trunk(self, trunk: sip.SIPInboundTrunkInfo) -> sip.SIPInboundTrunkInfo:
        created: sip.SIPInboundTrunkInfo = await self._call(
            "create_inbound_trunk", sip.CreateSIPInboundTrunkRequest(trunk=trunk)
        )
        return created

    async def update_inbound_trunk(
        self, trunk_id: str, trunk: sip.SIPInboundTrunkInfo
    ) -> sip.SIPInboundTrunkInfo:
        updated: sip.SIPInboundTrunkInfo = await self._call("update_inbound_trunk", trunk_id, trunk)
        return updated

    async def create_outbound_trunk(self, trunk: sip.SIPOutboundTrunkInfo) -> sip.SIPOutboundTrunkInfo:
        created: sip.SIPOutboundTrunkInfo = await self._call(
            "create_outbound_trunk", sip.CreateSIPOutboundTrunkRequest(trunk=trunk)
        )
        return created

    async def update_outbound_trunk(
        self, trunk_id: str, trunk: sip.SIPOutboundTrunkInfo
    ) -> sip.SIPOutboundTrunkInfo:
        updated: sip.SIPOutboundTrunkInfo = await self._call("update_outbound_trunk", trunk_id, trunk)
        return updated

    async def delete_trunk(self, trunk_id: str) -> None:
        await self._call("delete_trunk", sip.DeleteSIPTrunkRequest(sip_trunk_id=trunk_id))

    # --- dispatch rules --------------------------------------------------------------------------

    async def list_dispatch_rules(self) -> list[sip.SIPDispatchRuleInfo]:
        response = await self._call("list_dispatch_rule", sip.ListSIPDispatchRuleRequest())
        return list(response.items)

    async def create_dispatch_rule(self, rule: sip.SIPDispatchRuleInfo) -> sip.SIPDispatchRuleInfo:
        created: sip.SIPDispatchRuleInfo = await self._call(
            "create_dispatch_rule", sip.CreateSIPDispatchRuleRequest(dispatch_rule=rule)
        )
        return created

    async def update_dispatch_rule(
        self, rule_id: str, rule: sip.SIPDispatchRuleInfo
    ) -> sip.SIPDispatchRuleInfo:
        updated: sip.SIPDispatchRuleInfo = await self._call("update_dispatch_rule", rule_id, rule)
        return updated

    async def delete_dispatch_rule(self, rule_id: str) -> None:
        await self._call(
            "delete_dispatch_rule", sip.DeleteSIPDispatchRuleRequest(sip_dispatch_rule_id=rule_id)
        )

    # --- calls -----------------------------------------------------------------------------------

    async def create_sip_participant(
        self, *, trunk_id: str, to: str, from_number: str, room_name: str, identity: str
    ) -> sip.SIPParticipantInfo:
        request = sip.CreateSIPParticipantRequest(
            sip_trunk_id=trunk_id,
            sip_call_to=to,
            sip_number=from_number,
            room_name=room_name,
            participant_identity=identity,
            participant_name=to,
        )
        info: sip.SIPParticipantInfo = await self._call("create_sip_participant", request)
        return info

    async def transfer_sip_participant(
        self, *, room_name: str, identity: str, transfer_to: str, ringing_seconds: int = 30
    ) -> None:
        """Transfer the room's SIP participant to ``transfer_to`` (``tel:+49...`` or ``sip:...``) with a
        SIP REFER; answers once the target took the call. A busy, unanswered or refused target is a
        :class:`ProviderFailure` naming the SIP status."""
        request = sip.TransferSIPParticipantRequest(
            participant_identity=identity, room_name=room_name, transfer_to=transfer_to, play_dialtone=False
        )
        request.ringing_timeout.seconds = ringing_seconds
        response = await self._call("transfer_sip_participant", request)
        status = getattr(response, "status", sip.SIPTransferStatus.STS_TRANSFER_SUCCESSFUL)
        if status != sip.SIPTransferStatus.STS_TRANSFER_SUCCESSFUL:
            reason = sip.SIPTransferReason.Name(response.reason) if response.reason else "not completed"
            raise ProviderFailure(PROVIDER, f"the transfer did not complete ({reason})")

    async def remove_participant(self, *, room_name: str, identity: str) -> None:
        """Hang up a SIP participant: remove it from its room (LiveKit ends its SIP call)."""
        await self._call(
            "remove_participant",
            room.RoomParticipantIdentity(room=room_name, identity=identity),
            service="room",
        )
