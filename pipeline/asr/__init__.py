"""The recognizer, pure: VAD → utterances → batched Whisper → agreement → endpoint → outputs.

``engine.StreamingEngine`` is the entry point; ``factory.build_engine`` builds it from settings.
"""
