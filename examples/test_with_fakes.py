from toolselect.config import Settings
from toolselect.records import Tool
from toolselect.service import Service, compose
from toolselect.testing import FakeClock, FakeEmbedder, ScriptedTeacher, memory_store

CATALOG = [
    Tool("crypto_price", "Current price of a cryptocurrency such as bitcoin."),
    Tool("get_weather", "Current weather and forecast for a city."),
    Tool("shell_exec", "Run a shell command on the host."),
]
QUESTION = "che prezzo ha ETH oggi?"  # not one word in common with the descriptions


async def test_a_misrouted_turn_is_labelled_and_learned() -> None:
    """The agent fell back to the shell; the teacher's label teaches the ranker the query."""
    teacher = ScriptedTeacher({QUESTION: "crypto_price"})
    clock = FakeClock()  # stamps turns, labels and stored tools; decides what retention expires
    async with memory_store(CATALOG, clock=clock) as store:
        settings = Settings(teacher_share=1.0)  # ask about every turn the ranker cannot label
        parts = compose(settings, store, FakeEmbedder(), teacher=teacher, clock=clock)
        service = Service(parts)
        await service.connect()
        try:
            before = await service.ranking.rank(QUESTION, k=2)
            assert before.margin == 0.0  # a tie: nothing learned yet
            service.learning.observe(QUESTION, used_tool="shell_exec")
            assert await service.learner.drain(5.0)
            assert teacher.requests == [QUESTION]
            assert "crypto_price" in teacher.calls[0].candidate_names
            ranking = await service.ranking.rank("prezzo di ETH", k=2)
            assert ranking.tools[0] == "crypto_price" and ranking.margin > 0
        finally:
            await service.close()
