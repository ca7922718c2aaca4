"""Agents: SpecGuard as a tool-calling chat model (`chat_model.SpecGuardChatModel`)."""
