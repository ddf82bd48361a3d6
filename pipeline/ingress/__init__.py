"""The telephony ingress gateway (``streamscribe ingress``): call media in, audio.chunks out.

Pure core: ``rtp`` (packets, telephone-events, codecs), ``jitter`` (reorder buffer),
``calls`` (channels, timelines, the registry), ``media_streams`` (Twilio and audio_fork
messages). Thin shell: ``server`` (aiohttp, UDP, the ``AudioPublisher``) and ``metrics``.
"""
